"""The reference docs keep up with the code: every setting and every CLI command and option is documented."""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path

import click
from pydantic import BaseModel

from obsmem.secret_detectors import DETECTORS
from obsmem.settings import ENV_PREFIX, Settings
from obsmem.surfaces.cli import COMMANDS, cli

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _models_in(annotation: object) -> list[type[BaseModel]]:
    """Settings models inside a field's type (``ServerSettings``, ``list[ApiKey]``, ``X | None``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) in (list, tuple, typing.Union, types.UnionType):
        return [model for arg in typing.get_args(annotation) for model in _models_in(arg)]
    return []


def settings_fields(
    model: type[BaseModel] = Settings, prefix: str = "", in_list: bool = False
) -> Iterator[tuple[str, str | None, bool]]:
    """``(documented name, environment variable or None, is a section)`` for every field, recursively."""
    for name, field in model.model_fields.items():
        dotted = f"{prefix}{name}"
        env = None if in_list else ENV_PREFIX + dotted.upper().replace(".", "__")
        nested = _models_in(field.annotation)
        is_list = typing.get_origin(field.annotation) is list
        yield dotted, env, bool(nested) and not is_list
        for inner in nested:
            if is_list:
                yield from settings_fields(inner, f"{dotted}[].", in_list=True)
            else:
                yield from settings_fields(inner, f"{dotted}.", in_list=in_list)


def test_every_setting_is_documented_with_its_environment_variable() -> None:
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    rows = {
        match.group(1): line for line in text.splitlines() if (match := re.match(r"\| `([a-z0-9_.\[\]]+)` \|", line))
    }
    missing, no_env, sections = [], [], []
    for name, env, is_section in settings_fields():
        if is_section:
            if f"`[{name}]`" not in text:
                sections.append(name)
        elif name not in rows:
            missing.append(name)
        elif env is not None and f"`{env}`" not in rows[name]:
            no_env.append(f"{name} ({env})")
    assert not missing, f"settings without a row in docs/configuration.md: {missing}"
    assert not no_env, f"rows without their environment variable: {no_env}"
    assert not sections, f"sections without a `[name]` heading in docs/configuration.md: {sections}"
    known = {name for name, _, _ in settings_fields()}
    assert not set(rows) - known, f"documented settings that do not exist: {sorted(set(rows) - known)}"


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## obsmem (\S+)\s*$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_every_command_and_option_is_in_docs_cli() -> None:
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    sections = _sections(text)
    context = click.Context(cli)
    assert sorted(sections) == sorted(cli.list_commands(context)) == sorted(COMMANDS)
    for name in COMMANDS:
        command = cli.get_command(context, name)
        assert command is not None
        for param in command.params:
            for option in getattr(param, "opts", []):
                if option.startswith("--") and option != "--help":
                    assert option in sections[name], f"docs/cli.md: `obsmem {name}` does not mention {option}"
    for param in cli.params:
        for option in getattr(param, "opts", []):
            assert option in text, f"docs/cli.md does not mention the global option {option}"


def test_every_secret_detector_is_documented_with_its_marker() -> None:
    text = (DOCS / "redaction.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| `([a-z_]+)` \|", text, flags=re.MULTILINE))
    assert rows == {detector.name: detector.kind for detector in DETECTORS}
