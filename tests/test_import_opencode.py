"""opencode: the SQLite database (read-only, locked) and the older JSON storage tree."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from obsmem.app import Obsmem
from support.transcripts import copy_fixture, read_line, stored_events

LOCKER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
"""


def test_the_database_maps_parts_child_sessions_and_skips_bookkeeping(service: Obsmem, tmp_path: Path) -> None:
    db = copy_fixture("opencode", tmp_path) / "opencode" / "opencode.db"
    run = service.import_transcripts("opencode", [db])
    assert run.problems == 0 and run.added == 11
    assert dict(run.files[0].skipped) == {"reasoning": 1, "step-finish": 1, "step-start": 1, "synthetic": 1}
    events = stored_events(tmp_path / "data", "docs-site")
    assert {row[0] for row in events} == {"ses_01JQ", "ses_01JQ:ses_01JR"}  # the sub-agent's session names its parent
    main = [row for row in events if row[0] == "ses_01JQ"]
    assert main[1][5] == "task" and main[2][4] == "2 broken: /guide/setup, /api/v1"
    assert main[4][4] == "[error] oldString not found in content"
    assert main[6][2] == "system" and main[6][4].startswith("[compaction]")
    assert service.import_transcripts("opencode", [db]).added == 0


def test_new_parts_are_appended_and_an_unfinished_message_waits(service: Obsmem, tmp_path: Path) -> None:
    db = copy_fixture("opencode", tmp_path) / "opencode" / "opencode.db"
    service.import_transcripts("opencode", [db])
    conn = sqlite3.connect(db)
    unfinished = json.dumps({"role": "assistant", "time": {"created": 1746700090000}})
    conn.execute("INSERT INTO message VALUES ('msg_04', 'ses_01JQ', 1746700090000, 1746700090000, ?)", (unfinished,))
    text = json.dumps({"type": "text", "text": "working"})
    conn.execute("INSERT INTO part VALUES ('prt_20', 'msg_04', 'ses_01JQ', 1, 1, ?)", (text,))
    conn.commit()
    assert service.import_transcripts("opencode", [db]).added == 0  # the assistant message is not finished
    finished = json.dumps({"role": "assistant", "time": {"created": 1746700090000, "completed": 1746700099000}})
    conn.execute("UPDATE message SET data = ? WHERE id = 'msg_04'", (finished,))
    conn.commit()
    conn.close()
    grown = service.import_transcripts("opencode", [db])
    assert grown.added == 1 and grown.duplicates == 0
    assert stored_events(tmp_path / "data", "docs-site")[7][4] == "working"


def test_a_locked_database_is_reported_and_other_files_still_import(service: Obsmem, tmp_path: Path) -> None:
    db = copy_fixture("opencode", tmp_path) / "opencode" / "opencode.db"
    tree = copy_fixture("opencode-tree", tmp_path) / "storage" / "session" / "prj_2" / "ses_OLD1.json"
    # SQLite's locks are per process: the lock is held by another process, as opencode would hold it.
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert read_line(holder).strip() == "locked"
        run = service.import_transcripts("opencode", [db, tree])
    finally:
        holder.communicate("done\n", timeout=30)
    assert run.files[0].problems == {"database_locked": 1}
    assert run.files[1].added == 4
    assert [row[4] for row in stored_events(tmp_path / "data", "cli-tool")] == [
        "Add a --verbose flag.",
        "",
        "ok",
        "Added --verbose.",
    ]


def test_a_failed_assistant_message_is_stored_as_an_error_event(service: Obsmem, tmp_path: Path) -> None:
    db = copy_fixture("opencode", tmp_path) / "opencode" / "opencode.db"
    conn = sqlite3.connect(db)
    failed = {
        "role": "assistant",
        "time": {"created": 1746700090000},
        "error": {"name": "APIError", "data": {"message": "rate limited"}},
    }
    conn.execute(
        "INSERT INTO message VALUES ('msg_09', 'ses_01JQ', 1746700090000, 1746700090000, ?)", (json.dumps(failed),)
    )
    conn.commit()
    conn.close()
    run = service.import_transcripts("opencode", [db])
    assert run.problems == 0 and run.added == 12
    last = [row for row in stored_events(tmp_path / "data", "docs-site") if row[0] == "ses_01JQ"][-1]
    assert last[2:5] == ("system", "message", "[error] APIError: rate limited")


def test_a_database_read_only_in_part_is_read_again_next_time(service: Obsmem, tmp_path: Path) -> None:
    db = copy_fixture("opencode", tmp_path) / "opencode" / "opencode.db"
    conn = sqlite3.connect(db)
    # Reading the second session fails part-way (an integer overflow raised while its messages are read),
    # as a database that becomes locked or damaged mid-read would.
    conn.execute("ALTER TABLE part RENAME TO part_rows")
    conn.execute("CREATE INDEX part_by_message ON part_rows(message_id)")  # only the session's parts are read
    conn.execute(
        "CREATE VIEW part AS SELECT * FROM part_rows"
        " WHERE CASE WHEN session_id = 'ses_01JR' THEN abs(-9223372036854775807 - 1) ELSE 1 END"
    )
    conn.commit()
    first = service.import_transcripts("opencode", [db])
    assert first.files[0].problems == {"unreadable_database": 1} and first.added > 0
    again = service.import_transcripts("opencode", [db])  # the file itself did not change
    assert again.files[0].status != "unchanged" and again.files[0].problems == {"unreadable_database": 1}
    conn.execute("DROP VIEW part")
    conn.execute("ALTER TABLE part_rows RENAME TO part")
    conn.commit()
    conn.close()
    healed = service.import_transcripts("opencode", [db])
    assert healed.problems == 0 and first.added + healed.added == 11


def test_a_tree_session_whose_messages_grew_without_its_session_file_changing_is_read_again(
    service: Obsmem, tmp_path: Path
) -> None:
    # opencode touches the session file when a prompt starts, not when the reply's messages and parts are
    # written: the session looked unchanged and a reply written after an import was never imported.
    storage = copy_fixture("opencode-tree", tmp_path) / "storage"
    session = storage / "session" / "prj_2" / "ses_OLD1.json"
    assert service.import_transcripts("opencode", [session]).added == 4
    message = {"id": "msg_C", "sessionID": "ses_OLD1", "role": "user", "time": {"created": 1746700010000}}
    (storage / "message" / "ses_OLD1" / "msg_C.json").write_text(json.dumps(message), encoding="utf-8")
    part = {"id": "prt_C1", "messageID": "msg_C", "sessionID": "ses_OLD1", "type": "text", "text": "And --quiet?"}
    (storage / "part" / "msg_C").mkdir()
    (storage / "part" / "msg_C" / "prt_C1.json").write_text(json.dumps(part), encoding="utf-8")
    grown = service.import_transcripts("opencode", [session])
    assert (grown.files[0].status, grown.added) == ("imported", 1)
    assert stored_events(tmp_path / "data", "cli-tool")[-1][4] == "And --quiet?"
    part["text"] = "And --quiet, please?"  # a part rewritten in place, as a streamed reply's are
    (storage / "part" / "msg_C" / "prt_C1.json").write_text(json.dumps(part), encoding="utf-8")
    assert service.import_transcripts("opencode", [session]).files[0].status != "unchanged"
    assert service.import_transcripts("opencode", [session]).files[0].status == "unchanged"


def _write(path: Path, record: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record), encoding="utf-8")


def test_a_tree_session_is_looked_at_without_a_stat_of_every_part_and_finds_the_same_records(
    service: Obsmem, tmp_path: Path
) -> None:
    # A look stat-ed every message and part file of the session; now the message files, the names of the
    # part files, and the parts of the last message only. A reply streamed in place while a prompt queued
    # after it is the last message is still found, once opencode writes the reply finished.
    storage = copy_fixture("opencode-tree", tmp_path) / "storage"
    session = storage / "session" / "prj_2" / "ses_OLD1.json"
    assert service.import_transcripts("opencode", [session]).added == 4
    base = {"sessionID": "ses_OLD1"}
    reply = base | {"id": "msg_C", "role": "assistant", "time": {"created": 1746700010000}}
    text = base | {"id": "prt_C1", "messageID": "msg_C", "type": "text", "text": "Look"}
    call = base | {"id": "prt_C2", "messageID": "msg_C", "type": "tool", "callID": "c9", "tool": "bash"}
    call["state"] = {"status": "running", "input": {"command": "ls"}}
    queued = base | {"id": "msg_D", "role": "user", "time": {"created": 1746700020000}}
    prompt = base | {"id": "prt_D1", "messageID": "msg_D", "type": "text", "text": "Then commit."}
    _write(storage / "message" / "ses_OLD1" / "msg_C.json", reply)
    _write(storage / "part" / "msg_C" / "prt_C1.json", text)
    _write(storage / "part" / "msg_C" / "prt_C2.json", call)
    _write(storage / "message" / "ses_OLD1" / "msg_D.json", queued)
    _write(storage / "part" / "msg_D" / "prt_D1.json", prompt)
    waiting = service.import_transcripts("opencode", [session]).files[0]
    assert (waiting.status, waiting.added) == ("imported", 0)  # the reply is unfinished: nothing after it yet
    # The reply streams on in place (its parts' names do not change, and it is not the last message) ...
    _write(storage / "part" / "msg_C" / "prt_C1.json", text | {"text": "Looking at the files now."})
    _write(
        storage / "part" / "msg_C" / "prt_C2.json",
        call | {"state": {**call["state"], "status": "completed", "output": "a.txt"}},
    )
    assert service.import_transcripts("opencode", [session]).files[0].status == "unchanged"
    # ... and is written finished: that is seen, and everything is found.
    _write(
        storage / "message" / "ses_OLD1" / "msg_C.json", reply | {"time": {"created": 1746700010000, "completed": 1}}
    )
    finished = service.import_transcripts("opencode", [session]).files[0]
    assert (finished.status, finished.added) == ("imported", 4)
    with Obsmem(data_dir=tmp_path / "fresh") as fresh:
        assert fresh.import_transcripts("opencode", [session]).added == 8
    assert stored_events(tmp_path / "data", "cli-tool") == stored_events(tmp_path / "fresh", "cli-tool")
    assert [row[4] for row in stored_events(tmp_path / "data", "cli-tool")[-4:]] == [
        "Looking at the files now.",
        "",
        "a.txt",
        "Then commit.",
    ]
    # A part of an imported message rewritten in place is passed over (it would not be imported again).
    _write(
        storage / "part" / "msg_B" / "prt_B2.json",
        json.loads((storage / "part" / "msg_B" / "prt_B2.json").read_text()) | {"text": "Edited."},
    )
    assert service.import_transcripts("opencode", [session]).files[0].status == "unchanged"
    # A part added to any message, or the last message's part rewritten in place, is seen.
    _write(storage / "part" / "msg_D" / "prt_D1.json", prompt | {"text": "Then commit, please."})
    assert service.import_transcripts("opencode", [session]).files[0].status == "imported"
    _write(
        storage / "part" / "msg_A" / "prt_A9.json", base | {"id": "prt_A9", "messageID": "msg_A", "type": "step-finish"}
    )
    assert service.import_transcripts("opencode", [session]).files[0].status == "imported"
    assert service.import_transcripts("opencode", [session]).files[0].status == "unchanged"
    assert len(stored_events(tmp_path / "data", "cli-tool")) == 8


def test_a_reply_left_unfinished_is_imported_once_a_later_reply_is_finished(service: Obsmem, tmp_path: Path) -> None:
    # opencode killed mid-reply leaves the reply without a completion time or an error forever: the import
    # stopped at it, so nothing of the session after it was ever imported.
    db = copy_fixture("opencode", tmp_path) / "opencode" / "opencode.db"
    service.import_transcripts("opencode", [db])
    conn = sqlite3.connect(db)

    def add(message_id: str, at: int, data: dict[str, object], *parts: tuple[str, dict[str, object]]) -> None:
        conn.execute("INSERT INTO message VALUES (?, 'ses_01JQ', ?, ?, ?)", (message_id, at, at, json.dumps(data)))
        for part_id, part in parts:
            conn.execute("INSERT INTO part VALUES (?, ?, 'ses_01JQ', 1, 1, ?)", (part_id, message_id, json.dumps(part)))
        conn.commit()

    call = {"type": "tool", "tool": "bash", "callID": "c7", "state": {"status": "running", "input": {"command": "ls"}}}
    killed = {"role": "assistant", "time": {"created": 1746700090000}}
    add("msg_04", 1746700090000, killed, ("prt_20", {"type": "text", "text": "working"}), ("prt_21", call))
    add(
        "msg_05",
        1746700091000,
        {"role": "user", "time": {"created": 1746700091000}},
        ("prt_22", {"type": "text", "text": "again"}),
    )
    # A prompt after it is not enough: opencode writes a prompt queued while a reply streams.
    assert service.import_transcripts("opencode", [db]).added == 0
    reply = {"role": "assistant", "time": {"created": 1746700092000, "completed": 1746700093000}}
    add("msg_06", 1746700092000, reply, ("prt_23", {"type": "text", "text": "done"}))
    streaming = {"role": "assistant", "time": {"created": 1746700094000}}
    add("msg_07", 1746700094000, streaming, ("prt_24", {"type": "text", "text": "still streaming"}))
    conn.close()
    run = service.import_transcripts("opencode", [db])
    assert run.problems == 0 and run.added == 6 and run.duplicates == 0
    main = [row for row in stored_events(tmp_path / "data", "docs-site") if row[0] == "ses_01JQ"]
    assert [row[2:5] for row in main[-6:]] == [
        ("assistant", "message", "working"),
        ("assistant", "tool_call", ""),
        ("tool", "tool_result", "[error] the tool never finished"),
        ("system", "message", "[error] the reply was cut off"),
        ("user", "message", "again"),
        ("assistant", "message", "done"),
    ]  # the last reply, unfinished, still waits: it may be streaming
    assert json.loads(main[-5][6]) == {"command": "ls"} and main[-5][7] == main[-4][7] == "c7"
    assert service.import_transcripts("opencode", [db]).added == 0


def test_a_tree_reply_left_unfinished_is_imported_once_a_later_reply_is_finished(
    service: Obsmem, tmp_path: Path
) -> None:
    storage = copy_fixture("opencode-tree", tmp_path) / "storage"
    session = storage / "session" / "prj_2" / "ses_OLD1.json"
    assert service.import_transcripts("opencode", [session]).added == 4
    base = {"sessionID": "ses_OLD1"}
    killed = base | {"id": "msg_C", "role": "assistant", "time": {"created": 1746700010000}}
    _write(storage / "message" / "ses_OLD1" / "msg_C.json", killed)
    _write(storage / "part" / "msg_C" / "prt_C1.json", base | {"id": "prt_C1", "type": "text", "text": "Half a"})
    prompt = base | {"id": "msg_D", "role": "user", "time": {"created": 1746700020000}}
    _write(storage / "message" / "ses_OLD1" / "msg_D.json", prompt)
    _write(storage / "part" / "msg_D" / "prt_D1.json", base | {"id": "prt_D1", "type": "text", "text": "Go on."})
    assert service.import_transcripts("opencode", [session]).added == 0
    reply = base | {"id": "msg_E", "role": "assistant", "time": {"created": 1746700030000, "completed": 1}}
    _write(storage / "message" / "ses_OLD1" / "msg_E.json", reply)
    _write(storage / "part" / "msg_E" / "prt_E1.json", base | {"id": "prt_E1", "type": "text", "text": "Done."})
    run = service.import_transcripts("opencode", [session])
    assert (run.problems, run.added) == (0, 4)
    assert [row[4] for row in stored_events(tmp_path / "data", "cli-tool")[-4:]] == [
        "Half a",
        "[error] the reply was cut off",
        "Go on.",
        "Done.",
    ]
