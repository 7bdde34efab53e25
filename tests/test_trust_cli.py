"""``obsmem notes``, ``judgments``, ``judge resolve``, ``groom``, ``trust calibrate`` and ``search --trust``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from obsmem.app import Obsmem
from obsmem.settings import load_settings
from obsmem.surfaces.cli import cli


def run(data: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--data-dir", str(data), *args], catch_exceptions=False)


def as_json(data: Path, *args: str) -> Any:
    result = run(data, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_notes_from_save_to_trusted_through_the_cli(tmp_path: Path) -> None:
    data = tmp_path / "data"
    saved = as_json(data, "notes", "save", "app", "release with make ship", "--situation", "when releasing")
    assert saved["trusted"] is False and saved["status"] == "candidate"
    assert (
        "(trusted: false)"
        in run(data, "notes", "save", "app", "release with make ship", "--situation", "when releasing").output
    )
    assert as_json(data, "search", "app", "release")["hits"] == []
    found = as_json(data, "search", "app", "release", "--trust", "all")["hits"]
    assert [(hit["id"], hit["trusted"]) for hit in found] == [(saved["id"], False)]
    assert "untrusted note" in run(data, "search", "app", "release", "--trust", "all").output
    # The search queued a judge job (human provider by default); a worker run records the judgment.
    with Obsmem(load_settings(data_dir=data)) as service:
        assert service.worker_pool().drain(20)
    [judgment] = as_json(data, "judgments", "app", "--state", "escalated")["judgments"]
    assert judgment["note_id"] == saved["id"]
    resolved = as_json(data, "judge", "resolve", "app", judgment["judgment_id"], "--outcome", "true")
    assert resolved["state"] == "resolved" and resolved["outcome"] is True
    groomed = run(data, "groom", "app")
    assert groomed.exit_code == 0 and f"promoted {saved['id']} (project)" in groomed.output
    assert [note["status"] for note in as_json(data, "notes", "list", "app")["notes"]] == ["trusted"]
    report = as_json(data, "trust", "calibrate", "app")
    assert report["sample"] == 0 and report["suggested_threshold"] is None  # the human judgment had no p
    table = run(data, "trust", "calibrate", "app")
    assert table.exit_code == 0 and "threshold for precision >= 0.9: none in this sample (sample 0)" in table.output
    updated = as_json(data, "notes", "update", "app", saved["id"], "release with make release")
    assert updated["supersedes"] == saved["id"]
    assert run(data, "notes", "forget", "app", saved["id"]).output.strip() == f"{saved['id']}: forgotten"
    assert as_json(data, "search", "app", "make ship")["hits"] == []


def test_cli_mistakes_are_errors_not_tracebacks(tmp_path: Path) -> None:
    data = tmp_path / "data"
    empty = run(data, "notes", "save", "app", "   ")
    assert empty.exit_code == 2 and "error: invalid_request: content must not be empty" in empty.output
    unknown = run(data, "judge", "resolve", "app", "j0000000000000000", "--outcome", "true")
    assert unknown.exit_code == 1 and "project_not_found" in unknown.output
    run(data, "notes", "save", "app", "a fact")
    bad_id = run(data, "judge", "resolve", "app", "nope", "--outcome", "true")
    assert bad_id.exit_code == 2 and "judgment_id" in bad_id.output


def test_note_text_that_looks_like_markup_is_printed_as_written(tmp_path: Path) -> None:
    data = tmp_path / "data"
    content = "close the tag with [/] and style with [bold]x[/bold]"
    run(data, "notes", "save", "app", content, "--situation", "when [red]editing[/red] markup")
    listed = run(data, "notes", "list", "app")
    assert listed.exit_code == 0
    flat = " ".join(listed.output.replace("│", " ").split())
    assert "[/]" in flat and "[bold]x[/bold]" in flat and "[red]editing[/red]" in flat


def test_recall_of_a_note_id_through_the_cli_and_http(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from obsmem.surfaces.http import create_app
    from support.http_server import LOCAL

    data = tmp_path / "data"
    saved = as_json(data, "notes", "save", "app", "squash [merge] commits", "--situation", "when merging")
    shown = run(data, "recall", "app", saved["id"])
    assert shown.exit_code == 0, shown.output
    assert "squash [merge] commits" in shown.output and "candidate (trusted: false)" in shown.output
    assert "cites no conversation events" in " ".join(shown.output.split())
    assert as_json(data, "recall", "app", saved["id"])["memory"]["status"] == "candidate"
    with Obsmem(load_settings(data_dir=data)) as service, TestClient(create_app(service), base_url=LOCAL) as client:
        answer = client.get(f"/v1/projects/app/memories/{saved['id']}")
        assert answer.status_code == 200 and answer.json()["memory"]["kind"] == "note"
        missing = client.get("/v1/projects/app/memories/0123456789ab")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_listings_take_a_limit_and_say_when_more_exist(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for n in range(3):
        run(data, "notes", "save", "app", f"fact number {n}")
    listed = as_json(data, "notes", "list", "app", "--limit", "2")
    assert len(listed["notes"]) == 2 and listed["truncated"] is True
    table = run(data, "notes", "list", "app", "--limit", "2")
    assert "More notes exist than listed" in table.output
    assert run(data, "notes", "list", "app", "--limit", "0").exit_code == 2
    assert as_json(data, "judgments", "app", "--limit", "5") == {"judgments": [], "truncated": False}
