"""Aider's chat history: launches as sessions, user, reply and output blocks, growth."""

from __future__ import annotations

from pathlib import Path

from obsmem.app import Obsmem
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
