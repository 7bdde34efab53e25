"""The importers, export and restore, and the notes commands from the command line on PostgreSQL: the
same commands as on SQLite with ``[storage] backend = "postgres"`` (set through the environment), against a
real PostgreSQL started by the tests."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from obsmem.app import Obsmem
from obsmem.settings import load_settings
from obsmem.surfaces.cli import cli
from support.transcripts import copy_fixture


@pytest.fixture
def on_postgres(postgres_dsn: str) -> dict[str, str]:
    return {"OBSMEM_STORAGE__BACKEND": "postgres", "OBSMEM_STORAGE__DSN": postgres_dsn}


def run(data_dir: Path, env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(cli, ["--data-dir", str(data_dir), *args], env=env, catch_exceptions=False)


def _service(data_dir: Path, env: dict[str, str]) -> Obsmem:
    storage = {"backend": "postgres", "dsn": env["OBSMEM_STORAGE__DSN"]}
    return Obsmem(load_settings(data_dir=data_dir, storage=storage))


def _chat(path: Path) -> Path:
    lines = [
        {"role": "user", "content": "deploy the café build", "session_id": "chat-1"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "sh", "arguments": '{"cmd": "make ship"}'}}
            ],
            "session_id": "chat-1",
        },
        {"role": "tool", "tool_call_id": "c1", "content": "shipped 100%", "session_id": "chat-1"},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_a_jsonl_ingest_meeting_a_conflict_stores_nothing_of_the_file(
    tmp_path: Path, on_postgres: dict[str, str]
) -> None:
    data = tmp_path / "data"
    assert run(data, on_postgres, "ingest", "app", str(_chat(tmp_path / "chat.jsonl"))).exit_code == 0
    mixed = tmp_path / "mixed.jsonl"
    lines = [{"role": "user", "content": "new", "session_id": "chat-2"}, {"role": "user", "content": "other"}]
    mixed.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    refused = run(data, on_postgres, "ingest", "app", str(mixed), "--session", "chat-1")
    assert refused.exit_code == 1
    assert refused.stderr.startswith("error: seq_conflict: line 2: seq 1 of session 'chat-1' ")
    with _service(tmp_path, on_postgres) as service:
        assert service.status("app").to_dict()["events"] == 3  # chat-2's event was not stored either


def test_jsonl_ingest_stores_once_and_refuses_a_bad_file_whole(tmp_path: Path, on_postgres: dict[str, str]) -> None:
    data = tmp_path / "data"
    first = run(data, on_postgres, "ingest", "app", str(_chat(tmp_path / "chat.jsonl")), "--json")
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout)["events"]["sessions"]["chat-1"]["appended"] == 3
    again = run(data, on_postgres, "ingest", "app", str(tmp_path / "chat.jsonl"), "--json")
    assert json.loads(again.stdout)["events"]["sessions"]["chat-1"] == {"appended": 0, "duplicates": 3, "last_seq": 3}
    observations = tmp_path / "observations.jsonl"
    item = {"session_id": "chat-1", "timestamp": "2026-03-01 10:00", "importance": "high", "source_refs": [1, 3]}
    observations.write_text(
        json.dumps(item | {"content": "Shipped the café build"})
        + "\n"
        + json.dumps(item | {"content": "x", "source_refs": [9]})
        + "\n",
        encoding="utf-8",
    )
    written = run(data, on_postgres, "ingest", "app", "--observations", str(observations), "--json")
    assert written.exit_code == 1  # one observation cites an event that does not exist
    receipt = json.loads(written.stdout)["observations"]
    assert len(receipt["added"]) == 1 and [item["index"] for item in receipt["rejected"]] == [1]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"role": "user", "content": "fine", "session_id": "s9"}\n{"role": "nobody"}\n', encoding="utf-8")
    refused = run(data, on_postgres, "ingest", "fresh", str(bad))
    assert refused.exit_code != 0 and "line 2" in refused.stderr
    with _service(tmp_path, on_postgres) as service:
        assert service.project_names() == ["app"]  # the bad file created nothing
        hits = service.search("app", "MAKE SHIP", scope="conversation").hits
        assert [hit.to_dict()["seq"] for hit in hits] == [2]  # found in the tool call's arguments
        assert [
            hit.to_dict()["content"] for hit in service.search("app", "CAFÉ build").hits
        ] == []  # ASCII folding only
        assert [hit.to_dict()["content"] for hit in service.search("app", "café BUILD").hits] == [
            "Shipped the café build"
        ]
    assert not (data / "projects").exists()  # nothing went to the data directory


def test_transcript_imports_store_only_what_is_new(tmp_path: Path, on_postgres: dict[str, str]) -> None:
    data = tmp_path / "data"
    files = sorted(str(path) for path in (copy_fixture("claude-code", tmp_path) / "projects").glob("*/*.jsonl"))
    first = run(data, on_postgres, "import", "claude-code", *files, "--project", "shop", "--json")
    assert first.exit_code == 0, first.output
    added = json.loads(first.stdout)["totals"]["added"]
    assert added > 0
    again = run(data, on_postgres, "import", "claude-code", *files, "--project", "shop", "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["totals"]["added"] == 0
    with _service(tmp_path, on_postgres) as service:
        assert service.status("shop").events == added
        with service.database("shop").read() as conn:
            assert conn.execute("SELECT count(*) FROM import_files").fetchone()[0] == len(files)
            assert conn.execute("SELECT count(*) FROM import_records").fetchone()[0] > 0


def test_export_and_restore_on_postgres_keep_every_record(tmp_path: Path, on_postgres: dict[str, str]) -> None:
    data = tmp_path / "data"
    assert run(data, on_postgres, "ingest", "app", str(_chat(tmp_path / "chat.jsonl"))).exit_code == 0
    assert run(data, on_postgres, "notes", "save", "app", "ship with make ship").exit_code == 0
    with _service(tmp_path, on_postgres) as service:
        observation = {"session_id": "chat-1", "timestamp": "2026-03-01 10:00", "content": "Shipped the café build"}
        assert service.add_observations("app", [{**observation, "importance": "high", "source_refs": [1, 3]}]).added
    exported = run(data, on_postgres, "export", "app", "--output", str(tmp_path / "app.jsonl"), "--no-progress")
    assert exported.exit_code == 0, exported.output
    restored = run(data, on_postgres, "restore", str(tmp_path / "app.jsonl"), "--project", "copy", "--json")
    assert restored.exit_code == 0, restored.output
    counts = json.loads(restored.stdout)["counts"]
    assert (counts["event"], counts["observation"], counts["observation_source"], counts["note"]) == (3, 1, 2, 1)
    again = run(data, on_postgres, "export", "copy", "--output", str(tmp_path / "copy.jsonl"), "--no-progress")
    assert again.exit_code == 0
    assert (tmp_path / "copy.jsonl").read_bytes().splitlines()[1:-1] == (
        tmp_path / "app.jsonl"
    ).read_bytes().splitlines()[1:-1]
    refused = run(data, on_postgres, "restore", str(tmp_path / "app.jsonl"), "--project", "copy")
    assert refused.exit_code == 1 and "project_not_empty" in refused.stderr
    with _service(tmp_path, on_postgres) as service:
        # Restored ids continue: a new append and a new note get fresh row ids, not the restored ones.
        service.append_events("copy", "chat-2", [{"role": "user", "content": "after the restore"}])
        service.save_note("copy", "a second note")
        assert service.status("copy").events == 4 and len(service.notes("copy").notes) == 2
        listed = run(data, on_postgres, "notes", "list", "copy", "--json")
        assert {note["content"] for note in json.loads(listed.stdout)["notes"]} == {
            "ship with make ship",
            "a second note",
        }


def test_a_file_breaking_a_rule_restores_nothing_and_names_the_rule_not_the_text(
    tmp_path: Path, on_postgres: dict[str, str]
) -> None:
    data = tmp_path / "data"
    assert run(data, on_postgres, "ingest", "app", str(_chat(tmp_path / "chat.jsonl"))).exit_code == 0
    assert run(data, on_postgres, "export", "app", "--output", str(tmp_path / "app.jsonl")).exit_code == 0
    lines = (tmp_path / "app.jsonl").read_bytes().splitlines()
    header, records = json.loads(lines[0]), [json.loads(line) for line in lines[1:-1]]
    for record in records:
        if record["kind"] == "event" and record["row"]["seq"] == 3:
            record["row"]["seq"] = 2  # two events at one seq of a session
    body = b"".join(json.dumps(record, separators=(",", ":")).encode() + b"\n" for record in [header, *records])
    trailer = json.loads(lines[-1]) | {"sha256": hashlib.sha256(body).hexdigest()}
    (tmp_path / "bad.jsonl").write_bytes(body + json.dumps(trailer).encode() + b"\n")
    refused = run(data, on_postgres, "restore", str(tmp_path / "bad.jsonl"), "--project", "copy")
    assert refused.exit_code == 2 and "export_invalid" in refused.stderr, refused.output
    assert "constraint" in refused.stderr and "shipped" not in refused.stderr and "café" not in refused.stderr
    with _service(tmp_path, on_postgres) as service:
        assert "copy" not in service.project_names() or service.status("copy").events == 0


def test_status_of_projects_on_postgres(tmp_path: Path, on_postgres: dict[str, str]) -> None:
    """`obsmem status` without `--session` read the data directory of the SQLite registry and failed with an
    AttributeError traceback on PostgreSQL. No data directory holds the projects there: `data_dir` is null
    and an empty list names the database, never the DSN."""
    data_dir = tmp_path / "data"
    empty = run(data_dir, on_postgres, "status")
    assert empty.exit_code == 0
    assert "No projects in the PostgreSQL database yet" in empty.output
    assert on_postgres["OBSMEM_STORAGE__DSN"] not in empty.output
    with _service(data_dir, on_postgres) as service:
        service.append_events("p", "s1", [{"role": "user", "content": "deploy the build"}])
    one = run(data_dir, on_postgres, "status", "p", "--json")
    assert one.exit_code == 0 and json.loads(one.output)["events"] == 1
    every = json.loads(run(data_dir, on_postgres, "status", "--json").output)
    assert every["data_dir"] is None and [row["project"] for row in every["projects"]] == ["p"]
    table = run(data_dir, on_postgres, "status")
    assert table.exit_code == 0 and "p" in table.output
    missing = CliRunner().invoke(cli, ["--data-dir", str(data_dir), "status", "nope"], env=on_postgres)
    assert missing.exit_code != 0 and "project_not_found" in missing.output
