"""Line files read in reading processes store exactly what an in-process read stores.

Each case imports the same transcripts into two data directories, one with two ``[transcripts]
reading_processes`` (and no size floor, so they are used) and one with none, and compares
everything the import leaves behind: the events table, the sessions, the per-file reports (counts,
skips by reason, problems with their lines), the watermarks and the record ids imported once.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import apsw
import pytest

from obsmem.app import Obsmem
from obsmem.settings import load_settings
from obsmem.transcripts import importer
from support.transcripts import copy_fixture, write_jsonl

SESSION = "5e1d0c2a-8d3b-4c55-9a61-0b7e2f1d9a01"
RESUMED = "6f2e1d3b-0a1c-4f6e-8b3d-5c9f1e2a7d02"


def _service(data_dir: Path, *, worker: bool) -> Obsmem:
    options = {"reading_processes": 2 if worker else 0, "reading_min_megabytes": 0}
    return Obsmem(load_settings(data_dir=data_dir, transcripts=options))


def _rows(data_dir: Path) -> dict[str, dict[str, list[tuple[Any, ...]]]]:
    """Per project: every event (the receive time aside, for events whose record has no time), every
    session, the watermarks (the file's time aside) and the record ids."""
    found: dict[str, dict[str, list[tuple[Any, ...]]]] = {}
    for database in sorted((data_dir / "projects").glob("*/obsmem.db")):
        conn = apsw.Connection(str(database), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            found[database.parent.name] = {
                "events": conn.execute(
                    "SELECT session_id, seq, role, type, content, tool_name, tool_args, tool_call_id, fingerprint,"
                    " CASE WHEN created_at LIKE '2025-%' OR created_at LIKE '2024-%' THEN created_at END"
                    " FROM events ORDER BY id"
                ).fetchall(),
                "sessions": conn.execute(
                    "SELECT session_id, last_seq, event_count FROM sessions ORDER BY session_id"
                ).fetchall(),
                "watermarks": conn.execute(
                    "SELECT source, offset, head_sha256, tail_sha256, state, events FROM import_files ORDER BY path"
                ).fetchall(),
                "records": conn.execute("SELECT * FROM import_records ORDER BY 1").fetchall(),
            }
        finally:
            conn.close()
    return found


def _reports(run: Any, root: Path) -> list[dict[str, Any]]:
    """The run's per-file reports, with paths relative to the folder the files were copied into."""
    reports = []
    for report in run.files:
        shown = report.to_dict()
        shown["path"] = str(Path(shown["path"]).relative_to(root))
        reports.append(shown)
    return reports


def _all_children() -> set[int]:
    """Process ids of this process's children (Linux)."""
    found: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        found.update(int(pid) for pid in (task / "children").read_text().split())
    return found


# Children the test process had before the test began (the PostgreSQL server of other tests, ...): never the
# test's to count or to kill.
_EARLIER_CHILDREN: set[int] = set()


@pytest.fixture(autouse=True)
def _note_earlier_children() -> None:
    _EARLIER_CHILDREN.clear()
    _EARLIER_CHILDREN.update(_all_children())


def _children() -> set[int]:
    """Process ids of the children started since the test began: the reading processes."""
    return _all_children() - _EARLIER_CHILDREN


def _record(session: str, index: int, **extra: Any) -> dict[str, Any]:
    stamp = f"2025-03-01T10:{index // 60 % 60:02d}:{index % 60:02d}.{index % 1000:03d}Z"
    base = {"sessionId": session, "uuid": f"{session[:4]}-{index}", "cwd": "/w/shop", "timestamp": stamp}
    return base | extra


def _session_lines(session: str, turns: int, first: int = 0) -> list[Any]:
    """A session of requests, replies, tool calls and results, with skipped blocks and a secret."""
    lines: list[Any] = []
    for index in range(first, first + turns):
        lines.append(_record(session, 4 * index, type="user", message={"role": "user", "content": f"ask {index}"}))
        reply = [
            {"type": "thinking", "thinking": "hmm", "signature": "c2ln"},
            {"type": "text", "text": f"reply {index} with key sk-ant-api03-{'Q' * 40}{index:04d}"},
            {"type": "tool_use", "id": f"call-{index}", "name": "Bash", "input": {"command": f"ls {index}"}},
        ]
        lines.append(_record(session, 4 * index + 1, type="assistant", message={"role": "assistant", "content": reply}))
        result = {"type": "tool_result", "tool_use_id": f"call-{index}", "content": "out\n" * (index % 7)}
        lines.append(_record(session, 4 * index + 2, type="user", message={"role": "user", "content": [result]}))
        if index % 5 == 0:
            lines.append({"type": "file-history-snapshot", "messageId": f"m{index}", "snapshot": {}})
    return lines


BAD_LINES = [
    "{not json",
    '["a list"]',
    '{"type": "hologram", "sessionId": "s"}',
    json.dumps(_record(SESSION, 9001, type="user", message={"role": "user", "content": "x" * 2_000_001})),
    json.dumps(_record(SESSION, 9002, type="user", timestamp="yesterday", message={"role": "user", "content": "t"})),
    json.dumps(_record("bad session id " * 30, 9003, type="user", message={"role": "user", "content": "q"})),
]


def _transcripts(root: Path) -> list[Path]:
    """Several session files: small ones first (read in-process while the reading processes start), a
    long one, a resumed one replaying it, one with bad lines, one gzipped, one ending in a line still
    being written, and the same file named twice."""
    folder = root / "projects" / "-w-shop"
    small = [write_jsonl(folder / f"small-{n}.jsonl", _session_lines(f"{n}sml", 1)) for n in range(3)]
    long = write_jsonl(folder / f"{SESSION}.jsonl", _session_lines(SESSION, 60))
    replay = [dict(line, sessionId=RESUMED) for line in _session_lines(SESSION, 10)]
    resumed = write_jsonl(folder / f"{RESUMED}.jsonl", [*replay, *_session_lines(RESUMED, 12, first=100)])
    bad = write_jsonl(folder / "bad.jsonl", [*_session_lines("bad1", 3), *BAD_LINES, *_session_lines("bad1", 3, 50)])
    with open(bad, "ab") as handle:
        handle.write(b'{"type": "user", "sessionId": "s", "message": {"content": "\xff\xfe"}}\n')
        handle.write(json.dumps(_record("bad1", 999, type="user", message={"content": "half"})).encode()[:30])
    packed = folder / "packed.jsonl.gz"
    packed.write_bytes(gzip.compress(write_jsonl(root / "packed.jsonl", _session_lines("packed", 15)).read_bytes()))
    return [*small, long, resumed, bad, packed, long]


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A watermark every few events, so files span several chunks and several are read ahead."""
    monkeypatch.setattr(importer, "CHUNK_EVENTS", 7)


def _import_both(tmp_path: Path, source: str, make: Any, progress: Any = None) -> tuple[Any, ...]:
    results = []
    for worker in (True, False):
        root = tmp_path / ("worker" if worker else "inline")
        paths = make(root)
        with _service(root / "data", worker=worker) as memory:
            run = memory.import_transcripts(source, paths, project=None, progress=progress if worker else None)
            again = memory.import_transcripts(source, paths)
        results.append((_reports(run, root), _rows(root / "data"), again.added))
    return tuple(results)


def test_a_generated_set_stores_the_same_in_both_ways(tmp_path: Path, small_chunks: None) -> None:
    seen_children: list[set[int]] = []
    worker, inline = _import_both(tmp_path, "claude-code", _transcripts, lambda *_: seen_children.append(_children()))
    assert any(seen_children), "the reading process was not used"
    assert worker == inline
    reports, rows, again = worker
    assert again == 0
    assert {reason for report in reports for reason in report["problems"]} >= {
        "malformed_json",
        "not_an_object",
        "unknown_type",
        "invalid_event",
        "invalid_timestamp",
        "invalid_session",
        "invalid_utf8",
    }
    assert sum(report["skipped"].get("replayed", 0) for report in reports) == 30  # 10 replayed turns, 3 records each
    contents = [row[4] for row in rows["shop"]["events"]]
    assert len(contents) > 300 and not any("Q" * 40 in text for text in contents)  # redacted either way


@pytest.mark.parametrize("source", ["claude-code", "codex", "aider"])
def test_the_fixtures_store_the_same_in_both_ways(tmp_path: Path, small_chunks: None, source: str) -> None:
    def fixture_files(root: Path) -> list[Path]:
        folder = copy_fixture(source, root)
        return sorted(path for path in folder.rglob("*") if path.is_file())

    worker, inline = _import_both(tmp_path, source, fixture_files)
    assert worker == inline
    assert sum(report["added"] for report in worker[0]) > 0


def test_growth_read_in_the_process_continues_where_the_last_import_stopped(tmp_path: Path, small_chunks: None) -> None:
    def grown(root: Path) -> list[Path]:
        path = write_jsonl(root / "projects" / "-w-shop" / f"{SESSION}.jsonl", _session_lines(SESSION, 20))
        with _service(root / "data", worker=root.name == "worker") as memory:
            memory.import_transcripts("claude-code", [path])
        write_jsonl(path, _session_lines(SESSION, 25, first=20), mode="a")
        return [path]

    worker, inline = _import_both(tmp_path, "claude-code", grown)
    assert worker == inline
    assert worker[0][0]["added"] == 25 * 4  # a request, a reply, a call and its result per turn


def test_a_reading_process_that_dies_leaves_the_rest_to_this_one(tmp_path: Path, small_chunks: None) -> None:
    killed: list[int] = []

    def kill_the_reader(*_: Any) -> None:
        if not killed:
            for pid in _children():
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

    worker, inline = _import_both(tmp_path, "claude-code", _transcripts, kill_the_reader)
    assert killed
    assert worker == inline


def test_a_small_import_is_read_in_process(tmp_path: Path) -> None:
    """Below ``reading_min_megabytes`` no process is started (starting one costs more than it saves)."""
    folder = copy_fixture("claude-code", tmp_path) / "projects"
    seen: list[set[int]] = []
    with Obsmem(load_settings(data_dir=tmp_path / "data")) as memory:
        assert memory.settings.transcripts.reading_processes > 0
        run = memory.import_transcripts(
            "claude-code", sorted(folder.rglob("*.jsonl")), progress=lambda *_: seen.append(_children())
        )
    assert run.added == 25 and seen and not any(seen)


def test_a_file_that_disappears_before_its_turn_is_reported_as_in_process(tmp_path: Path, small_chunks: None) -> None:
    def vanishing(root: Path) -> list[Path]:
        paths = _transcripts(root)
        gone = root / "gone.jsonl"
        shutil.copy(paths[3], gone)
        gone.unlink()
        return [paths[3], gone, paths[4]]

    worker, inline = _import_both(tmp_path, "claude-code", vanishing)
    assert worker == inline
    assert worker[0][1]["status"] == "missing"


def test_an_aider_block_grown_after_an_import_is_read_again_from_its_start_in_both_ways(tmp_path: Path) -> None:
    """The reader learns where its lines start in the file (the watermark's offset) in a reading process too."""

    def continued(root: Path) -> list[Path]:
        history = root / "repo" / ".aider.chat.history.md"
        history.parent.mkdir(parents=True)
        history.write_text(
            "# aider chat started at 2025-03-01 08:00:00\n\n#### deploy\n\nDeploying now.\n"
            "\n> Applied edit to app.py\n",
            encoding="utf-8",
        )
        with _service(root / "data", worker=root.name == "worker") as memory:
            assert memory.import_transcripts("aider", [history]).added == 3
        with open(history, "a", encoding="utf-8") as handle:
            handle.write("> Commit 1a2b3c4 feat: deploy\n#### next\n")
        return [history]

    worker, inline = _import_both(tmp_path, "aider", continued)
    assert worker == inline
    assert worker[0][0]["added"] == 2  # the grown output block whole, then the new request
    outputs = [row[4] for row in worker[1]["repo"]["events"] if row[3] == "tool_result"]
    # The block as the first import ended, then grown: read again from where it starts, not its new lines alone.
    assert outputs == ["Applied edit to app.py", "Applied edit to app.py\nCommit 1a2b3c4 feat: deploy"]


def test_a_rewritten_file_read_in_a_process_stores_a_new_record_repeating_a_text(tmp_path: Path) -> None:
    """Records the session holds by id are taken out of the merge's counts whichever way the file is read."""

    def said(uuid: str, text: str) -> dict[str, Any]:
        return {"type": "user", "sessionId": SESSION, "uuid": uuid, "cwd": "/w/shop", "message": {"content": text}}

    def rewritten(root: Path) -> list[Path]:
        path = write_jsonl(root / f"{SESSION}.jsonl", [said("u1", "hello"), said("u2", "yes")])
        with _service(root / "data", worker=root.name == "worker") as memory:
            assert memory.import_transcripts("claude-code", [path]).added == 2
        records = [said("u1", "hello"), said("u2", "yes"), said("u3", "yes")]
        path.write_text("".join(json.dumps(dict(reversed(r.items()))) + "\n" for r in records), encoding="utf-8")
        return [path]

    worker, inline = _import_both(tmp_path, "claude-code", rewritten)
    assert worker == inline
    report = worker[0][0]
    assert (report["status"], report["added"], report["skipped"]) == ("rewritten", 1, {"duplicate_record": 2})
    assert [row[4] for row in worker[1]["shop"]["events"]] == ["hello", "yes", "yes"]
