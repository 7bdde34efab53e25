"""API key settings: every mistake stops start-up with a message naming the entry, never the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from obsmem.errors import ConfigurationError
from obsmem.settings import MIN_API_KEY_CHARS, load_settings

GOOD = "a-good-secret-0123456789"
OTHER = "another-secret-0123456789"


def refusal(tmp_path: Path, toml: str) -> str:
    config = tmp_path / "obsmem.toml"
    config.write_text(toml, encoding="utf-8")
    with pytest.raises(ConfigurationError) as caught:
        load_settings(config)
    assert caught.value.code == "configuration_error"
    return caught.value.message


def test_a_duplicate_key_names_both_entries_and_not_the_key(tmp_path: Path) -> None:
    message = refusal(
        tmp_path,
        f"[[api_keys]]\nname = 'ci'\nkey = '{GOOD}'\n"
        f"[[api_keys]]\nname = 'laptop'\nkey = '{OTHER}'\n"
        f"[[api_keys]]\nname = 'robot'\nkey = '{GOOD}'\nprojects = ['alpha']\n",
    )
    assert "entries 0 (ci) and 2 (robot) hold the same key" in message
    assert GOOD not in message and "a-good" not in message


@pytest.mark.parametrize("key", [" " * 24, "\t" * 20, ""])
def test_a_blank_key_is_refused(tmp_path: Path, key: str) -> None:
    message = refusal(tmp_path, f"[[api_keys]]\nkey = {json.dumps(key)}\n")
    assert "api_keys.0.key: is blank" in message


@pytest.mark.parametrize(
    "key", ["secret with spaces inside", "secret-with-a-newline\n-inside", "tab\tseparated-secret"]
)
def test_a_key_that_cannot_travel_in_a_header_is_refused(tmp_path: Path, key: str) -> None:
    message = refusal(
        tmp_path, f"[[api_keys]]\nkey = {json.dumps(f'{GOOD}-x')}\n[[api_keys]]\nkey = {json.dumps(key)}\n"
    )
    assert "api_keys.1.key: must not contain spaces or control characters" in message
    assert "secret" not in message.replace("api_keys", "")


def test_the_minimum_length_is_exact(tmp_path: Path) -> None:
    shortest = "k" * MIN_API_KEY_CHARS
    settings = load_settings(data_dir=tmp_path, api_keys=[{"key": shortest}])
    assert settings.api_keys[0].key.get_secret_value() == shortest
    message = refusal(tmp_path, f"[[api_keys]]\nkey = '{shortest[1:]}'\n")
    assert f"at least {MIN_API_KEY_CHARS} characters" in message and shortest[1:] not in message


@pytest.mark.parametrize("bad", ["../etc", "Alpha", "", " alpha", "a/b", "x" * 65, "**"])
def test_an_invalid_project_in_a_keys_list_names_its_position(tmp_path: Path, bad: str) -> None:
    message = refusal(tmp_path, f"[[api_keys]]\nkey = '{GOOD}'\nprojects = ['alpha', {json.dumps(bad)}]\n")
    assert "api_keys.0.projects: entry 1 is neither '*' nor a project name" in message


def test_a_project_named_like_a_secret_in_a_keys_list_is_refused_without_echoing_it(tmp_path: Path) -> None:
    slack_token = "xoxb-2048-4096-zk9qmt3vlp8r"  # a valid slug, refused as a project name by every surface
    message = refusal(tmp_path, f"[[api_keys]]\nkey = '{GOOD}'\nprojects = ['alpha', '{slack_token}']\n")
    assert "api_keys.0.projects: entry 1 looks like a secret" in message
    assert slack_token not in message and "zk9qmt3vlp8r" not in message


def test_valid_keys_load_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = [{"key": GOOD, "projects": ["alpha", "beta.2"]}, {"key": OTHER, "projects": ["*"]}]
    monkeypatch.setenv("OBSMEM_API_KEYS", json.dumps(keys))
    settings = load_settings(data_dir=tmp_path)
    assert [entry.projects for entry in settings.api_keys] == [["alpha", "beta.2"], ["*"]]


def test_a_duplicate_from_the_environment_is_refused_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OBSMEM_API_KEYS", json.dumps([{"key": GOOD}, {"key": GOOD, "name": "copy"}]))
    with pytest.raises(ConfigurationError) as caught:
        load_settings(data_dir=tmp_path)
    assert "entries 0 (unnamed) and 1 (copy) hold the same key" in caught.value.message
    assert GOOD not in caught.value.message
