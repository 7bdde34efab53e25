"""Aider's chat history: launches as sessions, user, reply and output blocks, growth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from obsmem.app import Obsmem
from obsmem.transcripts import importer
from support.transcripts import copy_fixture, stored_events


def test_launches_become_sessions_and_blocks_become_events(service: Obsmem, tmp_path: Path) -> None:
    history = copy_fixture("aider", tmp_path) / "weather-app" / ".aider.chat.history.md"
    run = service.import_transcripts("aider", [history])
    assert run.problems == 0 and run.added == 9 and dict(run.files[0].skipped) == {"banner": 2}
    events = stored_events(tmp_path / "data", "weather-app")  # the repository's folder name
    first = [row for row in events if row[0] == "aider-20250210T162001"]
    assert first[0][4] == "add caching to fetch_forecast\nkeep it in memory for 10 minutes"
    assert ">>>>>>> REPLACE" in first[1][4]  # a code block stays in the reply
    assert first[2][2:4] == ("tool", "tool_result") and first[2][4].startswith("Applied edit")
    assert first[4][4].startswith("[error] Error: NameError")


def test_a_new_launch_appended_later_is_its_own_session(service: Obsmem, tmp_path: Path) -> None:
    history = copy_fixture("aider", tmp_path) / "weather-app" / ".aider.chat.history.md"
    service.import_transcripts("aider", [history])
    with open(history, "a", encoding="utf-8") as handle:
        handle.write("\n# aider chat started at 2025-02-12 10:00:00\n\n#### bump the version\n\nBumped to 1.4.0.\n")
    grown = service.import_transcripts("aider", [history])
    assert grown.added == 2 and grown.duplicates == 0
    assert [row[4] for row in stored_events(tmp_path / "data", "weather-app") if row[0] == "aider-20250212T100000"] == [
        "bump the version",
        "Bumped to 1.4.0.",
    ]


def test_the_watermark_holds_no_text_and_a_block_continued_later_is_one_event(
    service: Obsmem, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = tmp_path / "repo" / ".aider.chat.history.md"
    history.parent.mkdir()
    history.write_text(
        "# aider chat started at 2025-03-01 08:00:00\n\n#### deploy to staging\n\nDeploying now.\n"
        "the staging host is ready\n\n> Applied edit to app.py\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(importer, "CHUNK_EVENTS", 1)  # a watermark after every event, mid-block too
    states: list[str] = []

    def saved_state(path: str, done: int, total: int) -> None:
        with service.database("repo").read() as conn:
            states.extend(row[0] for row in conn.execute("SELECT state FROM import_files"))

    first = service.import_transcripts("aider", [history], progress=saved_state)
    assert first.added == 3 and len(states) >= 2
    assert not any(text in state for state in states for text in ("staging", "Applied edit", "Deploying"))
    unchanged_then_closed = "#### next\n"
    with open(history, "a", encoding="utf-8") as handle:
        handle.write("> Commit 1a2b3c4 feat: deploy\n")
    grown = service.import_transcripts("aider", [history])
    with open(history, "a", encoding="utf-8") as handle:
        handle.write(unchanged_then_closed)
    closed = service.import_transcripts("aider", [history])
    outputs = [row[4] for row in stored_events(tmp_path / "data", "repo") if row[3] == "tool_result"]
    assert outputs[-1] == "Applied edit to app.py\nCommit 1a2b3c4 feat: deploy"  # one block, not two pieces
    assert (grown.added, closed.added) == (1, 1)  # the grown block whole, then only the new request


def test_a_block_open_at_the_end_of_an_import_is_not_stored_again_unchanged(service: Obsmem, tmp_path: Path) -> None:
    history = copy_fixture("aider", tmp_path) / "weather-app" / ".aider.chat.history.md"
    one_step = tmp_path / "one" / ".aider.chat.history.md"
    one_step.parent.mkdir()
    service.import_transcripts("aider", [history])  # ends in a reply: stored, and kept open
    with open(history, "a", encoding="utf-8") as handle:
        handle.write("\n#### thanks\n")
    assert service.import_transcripts("aider", [history]).added == 1  # the request; the reply is not stored again
    one_step.write_bytes(history.read_bytes())
    service.import_transcripts("aider", [one_step], project="one")
    assert stored_events(tmp_path / "data", "weather-app") == stored_events(tmp_path / "data", "one")


def test_an_earlier_versions_watermark_with_block_text_is_continued(service: Obsmem, tmp_path: Path) -> None:
    history = tmp_path / "repo" / ".aider.chat.history.md"
    history.parent.mkdir()
    history.write_text("# aider chat started at 2025-03-01 08:00:00\n\n#### q\n\nreply one\n", encoding="utf-8")
    service.import_transcripts("aider", [history])
    with service.database("repo").write() as conn:  # the open reply saved as an earlier version saved it
        (state,) = conn.execute("SELECT state FROM import_files").fetchone()
        saved = json.loads(state)
        reader = saved["reader"]
        saved["reader"] = {
            "session": reader["session"],
            "stamp": reader["stamp"],
            "kind": "reply",
            "lines": ["reply one"],
            "first_line": 5,
            "seen_user": True,
            "fenced": False,
        }
        conn.execute("UPDATE import_files SET state = ?", (json.dumps(saved),))
    with open(history, "a", encoding="utf-8") as handle:
        handle.write("reply two\n#### next\n")
    service.import_transcripts("aider", [history])
    with open(history, "a", encoding="utf-8") as handle:
        handle.write("answer\n")
    service.import_transcripts("aider", [history])
    assert [row[4] for row in stored_events(tmp_path / "data", "repo")] == [
        "q",
        "reply one",
        "reply one\nreply two",  # no record of what was stored of it: stored whole when it closes
        "next",
        "answer",
    ]


def test_a_line_with_bytes_that_are_not_utf8_is_kept_with_them_replaced(service: Obsmem, tmp_path: Path) -> None:
    # The line was dropped: the request it began was lost, and Aider's output after it was taken for the
    # start-up banner (no request before it) and skipped too.
    history = tmp_path / "repo" / ".aider.chat.history.md"
    history.parent.mkdir()
    history.write_bytes(
        b"# aider chat started at 2025-01-01 10:00:00\n\n#### rename caf\xe9.py\n\nDone.\n> Applied edit to cafe.py\n"
        b"\n#### thanks\n"
    )
    run = service.import_transcripts("aider", [history])
    assert run.files[0].problems == {"invalid_utf8": 1} and not run.files[0].skipped
    assert [row[2:5] for row in stored_events(tmp_path / "data", "repo")] == [
        ("user", "message", "rename caf\ufffd.py"),
        ("assistant", "message", "Done."),
        ("tool", "tool_result", "Applied edit to cafe.py"),
        ("user", "message", "thanks"),
    ]
