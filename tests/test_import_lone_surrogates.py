"""Text holding lone surrogates (Node.js cuts a string inside an emoji and writes JSON ``"\\ud83d"`` without
its pair) is imported with U+FFFD in their place and reported, in every format; the event was refused whole
(``invalid_event``) and lost. A timestamp that is not text (a number, an object) is reported as
``invalid_timestamp`` like any other timestamp obsmem cannot read, no longer replaced by the import time unsaid."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from obsmem.app import Obsmem
from support.transcripts import copy_fixture, stored_events, write_jsonl

HALF = "\ud83d"  # the first half of an emoji, without its second
SESSION = "5a7c1e2b-3d4f-4a6b-8c9d-0e1f2a3b4c5d"


def _claude(uuid: str, **fields: Any) -> dict[str, Any]:
    return {"type": "assistant", "sessionId": "cut", "cwd": "/w/cut", "uuid": uuid} | fields


def test_claude_code_keeps_messages_and_tool_calls_holding_lone_surrogates(service: Obsmem, tmp_path: Path) -> None:
    records = [
        _claude("u1", type="user", message={"role": "user", "content": f"ship it {HALF}"}),
        _claude(
            "u2",
            message={
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"done {HALF}!"},
                    {"type": "tool_use", "id": f"call{HALF}", "name": f"Bash{HALF}", "input": {f"k{HALF}": [HALF]}},
                ],
            },
        ),
        _claude(
            "u3",
            type="user",
            message={"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c", "content": f"ok{HALF}"}]},
        ),
    ]
    path = write_jsonl(tmp_path / "cut.jsonl", records)
    assert HALF not in path.read_text() and "\\ud83d" in path.read_text()  # as Node.js writes it
    report = service.import_transcripts("claude-code", [path]).files[0]
    assert report.added == 4 and dict(report.problems) == {"invalid_unicode": 4}
    assert {(p.reason, p.line) for p in report.listed} == {
        ("invalid_unicode", 1),
        ("invalid_unicode", 2),
        ("invalid_unicode", 3),
    }
    rows = stored_events(tmp_path / "data", "cut")
    assert [row[4] for row in rows] == ["ship it \ufffd", "done \ufffd!", "", "ok\ufffd"]
    call = rows[2]
    assert (call[5], call[7]) == ("Bash\ufffd", "call\ufffd") and call[6] == '{"k\ufffd":["\ufffd"]}'
    assert all("ship" not in p.detail for p in report.listed)  # no record text in the report
    again = service.import_transcripts("claude-code", [path])
    assert again.added == 0 and len(stored_events(tmp_path / "data", "cut")) == 4


@pytest.mark.parametrize(
    ("stamp", "problems"), [(1_700_000_000_000, 1), ({"at": "2025-01-01"}, 1), (True, 1), (None, 0)]
)
def test_claude_code_reports_a_timestamp_that_is_not_text(
    service: Obsmem, tmp_path: Path, stamp: object, problems: int
) -> None:
    path = write_jsonl(
        tmp_path / "t.jsonl", [_claude("s1", timestamp=stamp, message={"role": "assistant", "content": "kept"})]
    )
    report = service.import_transcripts("claude-code", [path]).files[0]
    assert report.added == 1 and report.problems == ({"invalid_timestamp": 1} if problems else {})
    assert [row[4] for row in stored_events(tmp_path / "data", "cut")] == ["kept"]


def _codex(kind: str, payload: dict[str, Any], stamp: object = "2025-04-11T10:00:00.000Z") -> dict[str, Any]:
    return {"timestamp": stamp, "type": kind, "payload": payload}


def test_codex_keeps_items_holding_lone_surrogates_and_reports_a_number_for_a_timestamp(
    service: Obsmem, tmp_path: Path
) -> None:
    records = [
        _codex("session_meta", {"id": SESSION, "cwd": "/w/rollout"}),
        _codex(
            "response_item",
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"a{HALF}"}]},
        ),
        _codex(
            "response_item",
            {"type": "function_call", "name": "shell", "arguments": f'{{"q": "{HALF}"}}', "call_id": "c1"},
        ),
        _codex("response_item", {"type": "function_call_output", "call_id": "c1", "output": f"b{HALF}"}),
        _codex(
            "response_item",
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "c"}]},
            17,
        ),
    ]
    path = write_jsonl(tmp_path / f"rollout-2025-04-11T10-00-00-{SESSION}.jsonl", records)
    report = service.import_transcripts("codex", [path]).files[0]
    assert report.added == 4 and dict(report.problems) == {"invalid_unicode": 3, "invalid_timestamp": 1}
    rows = stored_events(tmp_path / "data", "rollout")
    assert [row[4] for row in rows] == ["a\ufffd", "", "b\ufffd", "c"]
    assert "\ufffd" in rows[1][6]
    assert service.import_transcripts("codex", [path]).added == 0


def test_gemini_cli_keeps_a_message_holding_a_lone_surrogate(service: Obsmem, tmp_path: Path) -> None:
    chat = next((copy_fixture("gemini-cli", tmp_path) / ".gemini" / "tmp").rglob("session-*c9d8e7f6.jsonl"))
    chat.write_text(chat.read_text().replace("Renaming in routes.py.", "Renaming \\ud83d in routes.py."))
    report = service.import_transcripts("gemini-cli", [chat]).files[0]
    assert dict(report.problems) == {"invalid_unicode": 1}
    (project,) = [p.name for p in (tmp_path / "data" / "projects").iterdir()]
    contents = [row[4] for row in stored_events(tmp_path / "data", project)]
    assert "Renaming \ufffd in routes.py." in contents and len(contents) == 5
    assert service.import_transcripts("gemini-cli", [chat]).added == 0


def test_opencode_keeps_a_part_holding_a_lone_surrogate(service: Obsmem, tmp_path: Path) -> None:
    db = copy_fixture("opencode", tmp_path) / "opencode" / "opencode.db"
    with sqlite3.connect(db) as conn:
        changed = conn.execute(
            "UPDATE part SET data = replace(data, '2 broken', '2 \\ud83d broken') WHERE data LIKE '%2 broken%'"
        ).rowcount
    assert changed >= 1
    run = service.import_transcripts("opencode", [db])
    assert run.added == 11 and set(run.files[0].problems) == {"invalid_unicode"}
    main = [row for row in stored_events(tmp_path / "data", "docs-site") if row[0] == "ses_01JQ"]
    assert main[2][4] == "2 \ufffd broken: /guide/setup, /api/v1"
    assert service.import_transcripts("opencode", [db]).added == 0


def test_openai_chat_and_obsmem_lines_holding_lone_surrogates_are_kept(service: Obsmem, tmp_path: Path) -> None:
    chat = write_jsonl(
        tmp_path / "chat.jsonl",
        [
            {"role": "user", "content": f"x{HALF}"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": f'["{HALF}"]'}}],
            },
            {"role": "tool", "tool_call_id": "t1", "content": f"y{HALF}"},
        ],
    )
    events = write_jsonl(
        tmp_path / "events.jsonl",
        [{"role": "assistant", "type": "message", "content": f"z{HALF}", "created_at": 5}],
    )
    run = service.import_transcripts("openai-chat", [chat], project="plain")
    assert run.added == 3 and dict(run.files[0].problems) == {"invalid_unicode": 3}
    run = service.import_transcripts("obsmem", [events], project="plain")
    assert run.added == 1 and dict(run.files[0].problems) == {"invalid_timestamp": 1}
    contents = [row[4] for row in stored_events(tmp_path / "data", "plain")]
    assert sorted(contents) == ["", "x\ufffd", "y\ufffd", "z\ufffd"]
    assert service.import_transcripts("openai-chat", [chat], project="plain").added == 0
    assert service.import_transcripts("obsmem", [events], project="plain").added == 0


def test_gemini_cli_reports_a_number_for_a_timestamp(service: Obsmem, tmp_path: Path) -> None:
    chat = next((copy_fixture("gemini-cli", tmp_path) / ".gemini" / "tmp").rglob("session-*c9d8e7f6.jsonl"))
    chat.write_text(chat.read_text().replace('"2025-05-07T09:00:01.000Z"', "1746608401", 1))
    report = service.import_transcripts("gemini-cli", [chat]).files[0]
    assert dict(report.problems) == {"invalid_timestamp": 1} and report.added == 5


def test_opencode_reports_a_creation_time_that_is_not_a_number(service: Obsmem, tmp_path: Path) -> None:
    db = copy_fixture("opencode", tmp_path) / "opencode" / "opencode.db"
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE message SET data = json_set(data, '$.time.created', json('{\"at\": 1}')) WHERE id = 'msg_01'"
        )
    run = service.import_transcripts("opencode", [db])
    assert run.added == 11 and set(run.files[0].problems) == {"invalid_timestamp"}
    assert service.import_transcripts("opencode", [db]).added == 0


def test_tool_argument_keys_that_become_the_same_once_repaired_are_both_kept(service: Obsmem, tmp_path: Path) -> None:
    # "k\ud800" and "k\udc00" are both "k\ufffd" once repaired: the arguments became one key, and one value
    # was lost. The arguments are stored as their JSON text instead, repaired, both values in it.
    low = "\udc00"
    args = {f"k{HALF}": "first", f"k{low}": "second", "plain": {f"x{HALF}": 1}}
    record = _claude(
        "u1",
        message={"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "Bash", "input": args}]},
    )
    path = write_jsonl(tmp_path / "keys.jsonl", [record])
    report = service.import_transcripts("claude-code", [path]).files[0]
    assert report.added == 1 and dict(report.problems) == {"invalid_unicode": 1}
    stored = stored_events(tmp_path / "data", "cut")[0][6]
    assert json.loads(stored) == '{"k\ufffd": "first", "k\ufffd": "second", "plain": {"x\ufffd": 1}}'
    assert service.import_transcripts("claude-code", [path]).added == 0
