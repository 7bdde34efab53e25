"""Gemini CLI chats: the JSON and the JSONL-with-updates layouts, project hashes, rewinds and growth."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from obsmem.app import Obsmem
from obsmem.settings import load_settings
from support.transcripts import copy_fixture, stored_events, write_jsonl

ROOT = "/home/ann/src/atlas"
HASH = hashlib.sha256(ROOT.encode()).hexdigest()


def chats(tmp_path: Path) -> list[Path]:
    return sorted((copy_fixture("gemini-cli", tmp_path) / ".gemini" / "tmp").rglob("session-*"))


def test_both_layouts_fold_into_sessions_under_a_mapped_project(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path / "data", transcripts={"project_map": {ROOT: "atlas"}})
    with Obsmem(settings) as memory:
        run = memory.import_transcripts("gemini-cli", chats(tmp_path))
    assert run.problems == 0 and run.added == 13
    events = stored_events(tmp_path / "data", "atlas")  # the project hash matched the mapped path
    first = [row for row in events if row[0].startswith("b4c1")]
    assert [row[2:4] for row in first][:4] == [
        ("user", "message"),
        ("assistant", "message"),
        ("assistant", "tool_call"),
        ("tool", "tool_result"),
    ]
    assert first[3][4] == "router = APIRouter()\n" and first[5][4] == "[error] Command exited with code 1"
    assert first[6][2] == "system" and first[6][4].startswith("[error] Quota")
    second = [row[4] for row in events if row[0].startswith("c9d8")]
    # The rewind dropped "Actually, undo that."; the updated message replaced its running version.
    assert second == [
        "Rename the health endpoint to /healthz.",
        "Renaming in routes.py.",
        "",
        "Replaced 1 occurrence.",
        "Also update the README.",
    ]
    skipped = {reason: count for report in run.files for reason, count in report.skipped.items()}
    assert skipped == {"info": 1, "thoughts": 1}


def test_an_unmapped_hash_gets_a_gemini_slug_and_reimport_stores_nothing(service: Obsmem, tmp_path: Path) -> None:
    files = chats(tmp_path)
    service.import_transcripts("gemini-cli", files)
    again = service.import_transcripts("gemini-cli", files)
    assert again.added == 0 and [report.status for report in again.files] == ["unchanged", "unchanged"]
    assert len(stored_events(tmp_path / "data", f"gemini-{HASH[:12]}")) == 13


def test_a_running_tool_call_waits_and_new_messages_are_appended(service: Obsmem, tmp_path: Path) -> None:
    path = tmp_path / "chats" / "session-1.jsonl"
    header = {"sessionId": "g-1", "projectHash": HASH, "startTime": "2025-01-01T00:00:00Z"}
    running = {
        "id": "m2",
        "type": "gemini",
        "content": "checking",
        "toolCalls": [{"id": "t", "name": "ls", "args": {}, "status": "executing"}],
    }
    write_jsonl(path, [header, {"id": "m1", "type": "user", "content": "hi"}, running])
    assert service.import_transcripts("gemini-cli", [path], project="g").added == 1
    done = {
        **running,
        "toolCalls": [{"id": "t", "name": "ls", "args": {}, "status": "success", "result": [{"text": "a b"}]}],
    }
    write_jsonl(path, [done, {"id": "m3", "type": "user", "content": "thanks"}], mode="a")
    grown = service.import_transcripts("gemini-cli", [path], project="g")
    assert grown.added == 4 and grown.duplicates == 0
    assert [row[4] for row in stored_events(tmp_path / "data", "g")] == ["hi", "checking", "", "a b", "thanks"]
    # A rewind past what was stored: the file is merged, nothing is stored twice or removed.
    write_jsonl(path, [{"$rewindTo": "m1"}, {"id": "m4", "type": "user", "content": "again"}], mode="a")
    rewound = service.import_transcripts("gemini-cli", [path], project="g")
    assert rewound.files[0].status == "rewritten" and rewound.added == 1 and rewound.duplicates == 1
    assert [row[4] for row in stored_events(tmp_path / "data", "g")][-1] == "again"


def test_a_broken_chat_file_is_reported(service: Obsmem, tmp_path: Path) -> None:
    path = tmp_path / "chats" / "session-2.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"sessionId": "x"})[:-3], encoding="utf-8")
    run = service.import_transcripts("gemini-cli", [path], project="g")
    assert run.files[0].problems == {"malformed_json": 1} and run.added == 0


def test_a_rewind_keeps_a_prompt_sent_again_after_it(service: Obsmem, tmp_path: Path) -> None:
    path = tmp_path / "chats" / "session-r.jsonl"
    header = {"sessionId": "g-r", "projectHash": HASH, "startTime": "2025-01-01T00:00:00Z"}

    def said(mid: str, kind: str, text: str) -> dict[str, str]:
        return {"id": mid, "timestamp": "2025-01-01T00:00:01Z", "type": kind, "content": text}

    write_jsonl(
        path,
        [header, said("m1", "user", "start the migration"), said("m2", "gemini", "Ready?"), said("m3", "user", "yes")],
    )
    assert service.import_transcripts("gemini-cli", [path], project="rw").added == 3
    with service.database("rw").read() as conn:
        before = conn.execute("SELECT size, mtime_ns, state, events FROM import_files").fetchone()
    write_jsonl(
        path, [{"$rewindTo": "m1"}, said("m4", "gemini", "Dry run first?"), said("m5", "user", "yes")], mode="a"
    )
    rewound = service.import_transcripts("gemini-cli", [path], project="rw")
    assert (rewound.added, rewound.duplicates, rewound.files[0].status) == (2, 1, "rewritten")
    texts = ["start the migration", "Ready?", "yes", "Dry run first?", "yes"]  # nothing stored is removed
    assert [row[4] for row in stored_events(tmp_path / "data", "rw")] == texts
    with service.database("rw").write() as conn:  # as if the import had stopped before its watermark
        conn.execute("UPDATE import_files SET size = ?, mtime_ns = ?, state = ?, events = ?", before)
    assert service.import_transcripts("gemini-cli", [path], project="rw").added == 0
    with service.database("rw").write() as conn:  # and with no watermark at all
        conn.execute("DELETE FROM import_files")
    assert service.import_transcripts("gemini-cli", [path], project="rw").added == 0
    assert [row[4] for row in stored_events(tmp_path / "data", "rw")] == texts
