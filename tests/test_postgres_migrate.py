"""``obsmem migrate``: a project moved from SQLite to PostgreSQL and back is the same project.

The source is a SQLite project the pipeline ran over (the bundled sample's first sessions, with the
Observer, Reflector and Dropper played by the scripted chat server on loopback), with notes and their
judgments and ledger, a JSONL ingest and a Claude Code transcript import. It is migrated to a real
PostgreSQL (started by the tests) and back into a second data directory through the CLI; both copies are
verified by the command itself, and the test compares the two SQLite exports record by record, the
projections rendered on both SQLite sides, and searches on all three. Interrupted and refused migrations
are checked too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from obsmem.app import Obsmem
from obsmem.app.migrate import compare_exports
from obsmem.exporting import export_project
from obsmem.faults import CRASH_ENV
from obsmem.sample import events_by_session, observations
from obsmem.settings import load_settings
from obsmem.surfaces.cli import cli
from support.judgments import record_judged
from support.pipeline_service import SMALL_REFLECTION, pipeline_options
from support.scripted_chat import DropperScript, ObserverScript, PipelineScript, ReflectorScript, ScriptedChatServer
from support.transcripts import copy_fixture

PROJECT = "ledgerkite"
SESSIONS = 3


@dataclass
class Source:
    data_dir: Path
    sessions: list[str]


def _build_source(data_dir: Path, tmp: Path) -> list[str]:
    script = PipelineScript(ObserverScript(group=2), ReflectorScript(), DropperScript())
    with ScriptedChatServer(script) as chat:
        settings = load_settings(
            data_dir=data_dir, trust={"judge": {"provider": "human"}}, **pipeline_options(chat, **SMALL_REFLECTION)
        )
        with Obsmem(settings) as service:
            pool = service.start_workers(housekeeping=False)
            sessions = dict(list(events_by_session().items())[:SESSIONS])
            for session_id, events in sessions.items():
                batch = [{key: value for key, value in event.items() if key != "session_id"} for event in events]
                for start in range(0, len(batch), 100):
                    service.append_events(PROJECT, session_id, batch[start : start + 100])
            chosen = [item for item in observations() if item["session_id"] in sessions]
            assert not service.add_observations(PROJECT, chosen).rejected
            assert pool.drain(300), "the pipeline did not finish"
            for session_id in sessions:
                service.reflect(PROJECT, session_id)
            assert pool.drain(300), "the reflections did not finish"
            service.stop_workers()
            _write_notes(service)
            chat_file = tmp / "chat.jsonl"
            chat_file.write_text(
                json.dumps({"role": "user", "content": "the café ships on Fridays 100%", "session_id": "chat-1"})
                + "\n"
                + json.dumps({"role": "assistant", "content": "noted: ship_it on Friday", "session_id": "chat-1"})
                + "\n"
            )
            service.import_jsonl(PROJECT, chat_file)
            transcripts = sorted((copy_fixture("claude-code", tmp) / "projects").glob("*/*.jsonl"))
            run_report = service.import_transcripts("claude-code", transcripts, project=PROJECT)
            assert run_report.to_dict()["totals"]["added"] > 0
            return list(sessions)


def _write_notes(service: Obsmem) -> None:
    trusted = service.save_note(PROJECT, "release with make ship", situation="when releasing").note
    service.save_note(PROJECT, "the staging keys rotate monthly")
    forgotten = service.save_note(PROJECT, "an idea that was dropped").note
    service.forget_note(PROJECT, forgotten.id)
    with service.database(PROJECT).write() as conn:
        record_judged(conn, "j0000000000000001", trusted.note_id, "release", "human", 0.75, "escalate", None)
    service.resolve_judgment(PROJECT, "j0000000000000001", True)
    assert service.groom(PROJECT).promoted


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Source:
    root = tmp_path_factory.mktemp("migrate-source")
    sessions = _build_source(root / "data", root)
    return Source(root / "data", sessions)


def run(data_dir: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--data-dir", str(data_dir), *args], catch_exceptions=False)


def _export(data_dir: Path, project: str, path: Path) -> Path:
    with Obsmem(load_settings(data_dir=data_dir)) as service, path.open("wb") as out:
        export_project(service, project, out)
    return path


def _records(path: Path) -> list[bytes]:
    """Every record line of an export (the header, which carries the time it was written, left out)."""
    return path.read_bytes().splitlines()[1:]


def test_sqlite_to_postgres_and_back_is_byte_identical(source: Source, postgres_dsn: str, tmp_path: Path) -> None:
    there = run(source.data_dir, "migrate", PROJECT, "--to", "postgres", "--dsn", postgres_dsn, "--json")
    assert there.exit_code == 0, there.output
    report = json.loads(there.stdout)
    assert report["verified"] and report["mismatches"] == []
    counts = report["counts"]
    for kind in ("event", "observation", "reflection", "generation", "dropped_observation", "coverage", "note"):
        assert counts.get(kind, 0) > 0, kind
    assert counts["judgment"] == 1 and counts["trust_entry"] >= 4 and counts["import_file"] >= 1
    assert report["checks"]["searches"].endswith("exact searches compared")
    assert int(report["checks"]["searches"].split()[0]) >= 12  # needles from memories, events and notes

    back_dir = tmp_path / "back"
    back = run(back_dir, "migrate", PROJECT, "--to", "sqlite", "--dsn", postgres_dsn, "--json")
    assert back.exit_code == 0, back.output
    assert json.loads(back.stdout)["verified"]

    original = _records(_export(source.data_dir, PROJECT, tmp_path / "a.jsonl"))
    returned = _records(_export(back_dir, PROJECT, tmp_path / "b.jsonl"))
    assert returned[:-1] == original[:-1]
    # The trailer's counts; its checksum covers the header too, whose creation time differs.
    trailers = [{**json.loads(lines[-1]), "sha256": None} for lines in (returned, original)]
    assert trailers[0] == trailers[1]

    settings = {"trust": {"judge": {"provider": "none"}}}
    with (
        Obsmem(load_settings(data_dir=source.data_dir, **settings)) as first,
        Obsmem(load_settings(data_dir=back_dir, **settings)) as second,
        Obsmem(load_settings(data_dir=tmp_path / "x", storage={"backend": "postgres", "dsn": postgres_dsn})) as pg,
    ):
        for session in source.sessions:
            assert second.memory(PROJECT, session).to_dict() == first.memory(PROJECT, session).to_dict()
        for needle in ("make ship", "100%", "ship_it", "café", "staging keys", "Deployed"):
            for scope in ("memories", "conversation", "all"):
                ask = {"scope": scope, "trust": "all", "user": None}
                expected = [hit.to_dict() for hit in first.search(PROJECT, needle, **ask).hits]
                assert [hit.to_dict() for hit in pg.search(PROJECT, needle, **ask).hits] == expected
                assert [hit.to_dict() for hit in second.search(PROJECT, needle, **ask).hits] == expected
        assert pg.notes(PROJECT).to_dict() == first.notes(PROJECT).to_dict()


def test_a_target_holding_data_is_refused_unless_replaced(source: Source, postgres_dsn: str) -> None:
    assert run(source.data_dir, "migrate", PROJECT, "--to", "postgres", "--dsn", postgres_dsn).exit_code == 0
    again = run(source.data_dir, "migrate", PROJECT, "--to", "postgres", "--dsn", postgres_dsn)
    assert again.exit_code != 0 and "project_not_empty" in again.stderr and "--replace" in again.stderr
    assert postgres_dsn not in again.output
    replaced = run(
        source.data_dir, "migrate", PROJECT, "--to", "postgres", "--dsn", postgres_dsn, "--replace", "--progress"
    )
    assert replaced.exit_code == 0, replaced.output
    assert "writing the target" in replaced.stderr and "reading the target back" in replaced.stderr  # progress bars
    assert "Verified: the copy matches the source." in replaced.stdout


def test_an_unknown_project_or_no_database_is_refused_naming_it(source: Source, postgres_dsn: str) -> None:
    missing = run(source.data_dir, "migrate", "ghost", "--to", "postgres", "--dsn", postgres_dsn)
    assert missing.exit_code != 0 and "project_not_found" in missing.stderr
    no_dsn = run(source.data_dir, "migrate", PROJECT, "--to", "postgres")
    assert no_dsn.exit_code == 2 and "--dsn" in no_dsn.stderr


def test_an_interrupted_migration_leaves_the_target_empty_and_a_rerun_completes(
    source: Source, postgres_dsn: str, tmp_path: Path
) -> None:
    command = [sys.executable, "-m", "obsmem.surfaces.cli", "--data-dir", str(source.data_dir)]
    command += ["migrate", PROJECT, "--as", "moved", "--to", "postgres", "--no-progress"]
    env = {**os.environ, "OBSMEM_STORAGE__DSN": postgres_dsn, CRASH_ENV: "restore:written"}
    killed = subprocess.run(command, env=env, capture_output=True, timeout=300, check=False)
    assert killed.returncode == -9, killed.stderr[-2000:]
    settings = load_settings(data_dir=tmp_path, storage={"backend": "postgres", "dsn": postgres_dsn})
    with Obsmem(settings) as pg:
        if "moved" in pg.project_names():
            status = pg.status("moved")
            assert (status.events, status.observations, status.sessions) == (0, 0, 0)  # never half filled
            assert pg.notes("moved", user=None).notes == []
    env.pop(CRASH_ENV)
    rerun = subprocess.run(command, env=env, capture_output=True, timeout=300, check=False)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert b"Verified" in rerun.stdout


def test_differences_are_named_by_kind_and_id_never_by_content(tmp_path: Path, source: Source) -> None:
    original = _export(source.data_dir, PROJECT, tmp_path / "a.jsonl")
    lines = original.read_bytes().splitlines(keepends=True)
    first = next(n for n, line in enumerate(lines) if json.loads(line).get("kind") == "observation")
    record = json.loads(lines[first])
    record["row"]["content"] = "altered secret text"
    tampered = tmp_path / "b.jsonl"
    tampered.write_bytes(b"".join([*lines[:first], (json.dumps(record) + "\n").encode(), *lines[first + 1 :]]))
    problems = compare_exports(original, tampered)
    assert problems == [f"observation: record 1 differs (memory_id {record['row']['memory_id']})"]
    shorter = tmp_path / "c.jsonl"
    shorter.write_bytes(b"".join([lines[0], *(line for line in lines[1:] if not line.startswith(b'{"kind":"note"'))]))
    assert compare_exports(original, shorter) == ["note: 3 records in the source, 0 in the target"]


def test_text_postgresql_cannot_hold_is_refused_whole_naming_why(tmp_path: Path, postgres_dsn: str) -> None:
    data = tmp_path / "data"
    with Obsmem(load_settings(data_dir=data)) as service:
        service.append_events("nul", "s1", [{"role": "user", "content": "fine"}, {"role": "user", "content": "a\x00b"}])
    refused = run(data, "migrate", "nul", "--to", "postgres", "--dsn", postgres_dsn)
    assert refused.exit_code != 0 and "not_on_postgres" in refused.stderr and "U+0000" in refused.stderr
    assert "a\x00b" not in refused.output
    with Obsmem(load_settings(data_dir=tmp_path / "x", storage={"backend": "postgres", "dsn": postgres_dsn})) as pg:
        assert "nul" not in pg.project_names() or pg.status("nul").events == 0
