"""``obsmem ingest`` of a transcript stores the whole file or nothing, and its errors name the file's line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apsw
from click.testing import CliRunner, Result

from obsmem.importing import BATCH_SIZE
from obsmem.surfaces.cli import cli
from support.transcripts import write_jsonl


def run(data_dir: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--data-dir", str(data_dir), *args], catch_exceptions=False)


def stored(data_dir: Path, project: str) -> list[tuple[Any, ...]]:
    """``(session, seq, content)`` of every stored event of ``project``."""
    conn = apsw.Connection(str(data_dir / "projects" / project / "obsmem.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return conn.execute("SELECT session_id, seq, content FROM events ORDER BY session_id, seq").fetchall()
    finally:
        conn.close()


def test_a_conflict_in_a_later_session_stores_nothing_of_the_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = write_jsonl(tmp_path / "a.jsonl", [{"role": "user", "content": "original"}])
    assert run(data, "ingest", "proj", str(first), "--session", "s-old").exit_code == 0
    mixed = write_jsonl(
        tmp_path / "mixed.jsonl",
        [
            {"role": "user", "content": "brand new text", "session_id": "s-new"},
            {"role": "user", "content": "different text", "session_id": "s-old"},
        ],
    )
    result = run(data, "ingest", "proj", str(mixed))
    assert result.exit_code == 1
    assert result.stderr == "error: seq_conflict: line 2: seq 1 of session 's-old' already holds a different event\n"
    assert stored(data, "proj") == [("s-old", 1, "original")]


def test_a_conflict_past_the_first_batch_stores_nothing_and_names_the_files_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    clash = BATCH_SIZE * 2 + 200  # in the third batch of the session
    before = write_jsonl(tmp_path / "pre.jsonl", [{"role": "user", "type": "message", "content": "x", "seq": clash}])
    assert run(data, "ingest", "p", str(before), "--session", "ee").exit_code == 0
    chat = write_jsonl(tmp_path / "chat.jsonl", [{"role": "user", "content": f"line {n}"} for n in range(clash + 300)])
    result = run(data, "ingest", "p", str(chat), "--session", "ee")
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: seq_conflict: line {clash}: seq {clash} of session 'ee' ")
    assert stored(data, "p") == [("ee", clash, "x")]


def test_a_file_giving_one_seq_two_events_is_malformed_and_stores_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    events = [
        {"role": "user", "type": "message", "content": "a", "session_id": "s1"},
        {"role": "user", "type": "message", "content": "secret plan", "seq": 1, "session_id": "s1"},
    ]
    result = run(data, "ingest", "p", str(write_jsonl(tmp_path / "twice.jsonl", events)))
    assert result.exit_code == 2
    assert result.stderr == (
        "error: invalid_request: line 2: seq 1 of session 's1' is used by line 1 for a different event\n"
    )
    assert not (data / "projects" / "p").exists()


def test_the_same_event_twice_in_a_file_is_stored_once_and_a_second_ingest_stores_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    event = {"role": "user", "type": "message", "content": "a", "seq": 1}
    path = write_jsonl(tmp_path / "twice.jsonl", [event, event, {"role": "assistant", "content": "b"}])
    first = run(data, "ingest", "p", str(path), "--session", "s1", "--json")
    assert first.exit_code == 0 and '"appended": 2' in first.stdout and '"duplicates": 1' in first.stdout
    again = run(data, "ingest", "p", str(path), "--session", "s1", "--json")
    assert again.exit_code == 0 and '"appended": 0' in again.stdout and '"duplicates": 3' in again.stdout
    assert stored(data, "p") == [("s1", 1, "a"), ("s1", 2, "b")]


def test_a_transcript_without_events_creates_no_project(tmp_path: Path) -> None:
    data = tmp_path / "data"
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n", encoding="utf-8")
    result = run(data, "ingest", "brandnew", str(empty), "--session", "s", "--json")
    assert result.exit_code == 0 and '"appended": 0' in result.stdout
    assert not (data / "projects" / "brandnew").exists()
    missing = run(data, "search", "brandnew", "x")
    assert (missing.exit_code, missing.stderr) == (1, "error: project_not_found: project 'brandnew' does not exist\n")


def test_lines_holding_lone_surrogates_are_stored_repaired_and_named(tmp_path: Path) -> None:
    # Node.js writes JSON "\ud83d" without its pair when it cuts a string inside an emoji: the file was
    # refused whole for half a character; the text is now kept with U+FFFD, and the lines are named.
    data = tmp_path / "data"
    half = "\ud83d"
    lines = [
        {"role": "user", "content": "plain"},
        {"role": "user", "content": f"cut {half} here"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": f"c{half}", "function": {"name": "Bash", "arguments": json.dumps({"k": half})}}],
        },
        {"role": "assistant", "type": "message", "content": "after"},
    ]
    path = write_jsonl(tmp_path / "cut.jsonl", lines)
    assert "\\ud83d" in path.read_text(encoding="utf-8")  # as Node.js writes it
    result = run(data, "ingest", "p", str(path), "--session", "s", "--json")
    assert result.exit_code == 0, result.stderr
    receipt = json.loads(result.stdout)["events"]
    assert (receipt["appended"], receipt["problems"]) == (4, {"invalid_unicode": 2})
    assert [(p["reason"], p["line"]) for p in receipt["problem_lines"]] == [
        ("invalid_unicode", 2),
        ("invalid_unicode", 3),
    ]
    assert all("cut" not in p["detail"] for p in receipt["problem_lines"])  # no line's text in the receipt
    assert stored(data, "p") == [("s", 1, "plain"), ("s", 2, "cut \ufffd here"), ("s", 3, ""), ("s", 4, "after")]
    conn = apsw.Connection(str(data / "projects" / "p" / "obsmem.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        call = conn.execute("SELECT tool_name, tool_args, tool_call_id FROM events WHERE seq = 3").fetchone()
    finally:
        conn.close()
    assert call == ("Bash", '{"k":"\ufffd"}', "c\ufffd")
    again = run(data, "ingest", "p", str(path), "--session", "s")  # repaired the same way: all duplicates
    assert again.exit_code == 0 and "0 appended, 4 already stored" in again.stdout
    assert "invalid_unicode" in again.stdout and "Lines stored with a defect" in again.stdout


def test_lines_holding_bytes_that_are_not_utf8_are_stored_replaced_and_named(tmp_path: Path) -> None:
    # A surrogate written as bytes (as a CESU-8 writer or a cut emoji leaves it) or a Latin-1 byte refused
    # the whole file ("line N: not UTF-8 text"); the bytes are now kept as U+FFFD, and the lines are named.
    data = tmp_path / "data"
    path = tmp_path / "bytes.jsonl"
    path.write_bytes(
        b'{"role": "user", "content": "plain"}\n'
        b'{"role": "user", "content": "cut \xed\xa0\xbd here"}\n'
        b'{"role": "assistant", "content": "caf\xe9 \\ud83d"}\n'
        b'{"role": "assistant", "type": "message", "content": "after"}\n'
    )
    result = run(data, "ingest", "p", str(path), "--session", "s", "--json")
    assert result.exit_code == 0, result.stderr
    receipt = json.loads(result.stdout)["events"]
    assert (receipt["appended"], receipt["problems"]) == (4, {"invalid_utf8": 2})
    lines = [(p["reason"], p["line"]) for p in receipt["problem_lines"]]
    assert lines == [("invalid_utf8", 2), ("invalid_utf8", 3)]
    assert "not UTF-8" in receipt["problem_lines"][0]["detail"]
    assert (
        "not UTF-8" in receipt["problem_lines"][1]["detail"] and "surrogates" in receipt["problem_lines"][1]["detail"]
    )
    assert all("cut" not in p["detail"] and "caf" not in p["detail"] for p in receipt["problem_lines"])
    assert stored(data, "p") == [
        ("s", 1, "plain"),
        ("s", 2, "cut \ufffd\ufffd\ufffd here"),
        ("s", 3, "caf\ufffd \ufffd"),
        ("s", 4, "after"),
    ]
    again = run(data, "ingest", "p", str(path), "--session", "s")  # replaced the same way: all duplicates
    assert again.exit_code == 0 and "0 appended, 4 already stored" in again.stdout
    assert "invalid_utf8" in again.stdout


def test_tool_argument_keys_that_become_the_same_once_repaired_keep_both_values(tmp_path: Path) -> None:
    # Both keys are "k\ufffd" once repaired: one value was lost; the arguments are kept as their text.
    data = tmp_path / "data"
    high, low = "\ud83d", "\udc00"
    arguments = json.dumps({f"k{high}": "first", f"k{low}": "second"})
    call = {"id": "c1", "type": "function", "function": {"name": "Bash", "arguments": arguments}}
    path = write_jsonl(tmp_path / "keys.jsonl", [{"role": "assistant", "content": "", "tool_calls": [call]}])
    result = run(data, "ingest", "p", str(path), "--session", "s", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["events"]["problems"] == {"invalid_unicode": 1}
    conn = apsw.Connection(str(data / "projects" / "p" / "obsmem.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        (stored,) = conn.execute("SELECT tool_args FROM events").fetchone()
    finally:
        conn.close()
    assert json.loads(stored) == '{"k\ufffd": "first", "k\ufffd": "second"}'
