"""Event appends: idempotent on an identical seq, conflicts are atomic, validation names the field."""

from __future__ import annotations

import json

import pytest

from obsmem.app import Obsmem
from obsmem.errors import InvalidSession, SeqConflict, ValidationFailed
from obsmem.importing import BATCH_SIZE, SessionTotals


def _rows(service: Obsmem, project: str = "p") -> list[tuple]:
    return service.database(project).query("SELECT session_id, seq, role, type, content FROM events ORDER BY id")


def test_append_numbers_events_and_reports_last_seq(service: Obsmem) -> None:
    receipt = service.append_events(
        "p", "s1", [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    )
    assert receipt.to_dict() == {"appended": 2, "duplicates": 0, "last_seq": 2}
    receipt = service.append_events("p", "s1", [{"role": "user", "content": "c"}])
    assert receipt.last_seq == 3
    assert [row[1] for row in _rows(service)] == [1, 2, 3]


def test_identical_event_at_used_seq_is_a_duplicate(service: Obsmem) -> None:
    event = {"seq": 1, "role": "assistant", "type": "tool_call", "tool_name": "grep", "tool_args": {"q": "x"}}
    service.append_events("p", "s1", [event])
    receipt = service.append_events(
        "p", "s1", [event, {"seq": 2, "role": "tool", "type": "tool_result", "content": "ok"}]
    )
    assert (receipt.appended, receipt.duplicates, receipt.last_seq) == (1, 1, 2)


def test_different_event_at_used_seq_conflicts_and_stores_nothing(service: Obsmem) -> None:
    service.append_events("p", "s1", [{"seq": 1, "role": "user", "content": "a"}])
    with pytest.raises(SeqConflict) as caught:
        service.append_events(
            "p", "s1", [{"seq": 2, "role": "user", "content": "new"}, {"seq": 1, "role": "user", "content": "changed"}]
        )
    assert caught.value.status == 409 and caught.value.field == "events.1.seq"
    assert "changed" not in caught.value.message
    assert _rows(service) == [("s1", 1, "user", "message", "a")]


def test_conflict_inside_one_batch(service: Obsmem) -> None:
    with pytest.raises(SeqConflict):
        service.append_events(
            "p", "s1", [{"seq": 5, "role": "user", "content": "a"}, {"seq": 5, "role": "user", "content": "b"}]
        )
    assert not service.projects.exists("p") or _rows(service) == []


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ({"role": "robot", "content": "x"}, "events.0.role"),
        ({"role": "user", "type": "thought"}, "events.0.type"),
        ({"role": "user", "seq": 0}, "events.0.seq"),
        ({"role": "user", "seq": 2**60}, "events.0.seq"),
        ({"role": "user", "content": "\ud800"}, "events.0.content"),
        ({"role": "user", "surprise": 1}, "events.0.surprise"),
        ({"role": "user", "created_at": "yesterday"}, "events.0.created_at"),
    ],
)
def test_invalid_events_name_the_field(service: Obsmem, event: dict, field: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        service.append_events("p", "s1", [{"role": "user", "content": "fine"}, event][1:])
    assert caught.value.field == field
    assert not service.projects.exists("p") or _rows(service) == []


@pytest.mark.parametrize("session", ["", "../x", "a/b", "x" * 129, " s", "s\n"])
def test_bad_session_ids_are_rejected(service: Obsmem, session: str) -> None:
    with pytest.raises(InvalidSession):
        service.append_events("p", session, [{"role": "user", "content": "a"}])


def test_tool_args_round_trip_and_timestamps_normalise_to_utc(service: Obsmem) -> None:
    service.append_events(
        "p",
        "s1",
        [
            {
                "role": "assistant",
                "type": "tool_call",
                "tool_name": "edit",
                "tool_args": {"path": "a.py", "line": 3},
                "created_at": "2026-03-01T10:00:00+02:00",
            }
        ],
    )
    row = service.database("p").query("SELECT tool_args, created_at FROM events")[0]
    assert row == ('{"line":3,"path":"a.py"}', "2026-03-01T08:00:00.000Z")


def test_importing_a_bad_transcript_creates_no_project(service: Obsmem, tmp_path) -> None:  # type: ignore[no-untyped-def]
    transcript = tmp_path / "bad.jsonl"
    transcript.write_text('{"role": "user", "content": "fine"}\n{"role": "robot"}\n', encoding="utf-8")
    with pytest.raises(ValidationFailed) as caught:
        service.import_jsonl("fresh", transcript, session_id="s1")
    assert "line 2" in caught.value.message
    assert not service.projects.exists("fresh")
    assert not service.projects.directory("fresh").exists()


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("[" * 100_000 + "]" * 100_000, "line 1: not valid JSON (nested too deeply)"),
        ('{"role": "user", "seq": ' + "9" * 5000 + "}", "line 1: not valid JSON (a number too long to read)"),
        ('{"role": "assistant", "tool_calls": [{"id": "c1", "function": "read_file"}]}', "line 1: tool_calls"),
        ('{"role": "assistant", "tool_calls": {"id": "c1"}}', "line 1: tool_calls must be a list"),
        ('{"role": "user", "content": "x", "created_at": "2026-02-30T10:00:00"}', "line 1.created_at: "),
    ],
)
def test_odd_transcript_lines_are_validation_errors_naming_the_line(
    service: Obsmem,
    tmp_path,
    line: str,
    expected: str,  # type: ignore[no-untyped-def]
) -> None:
    transcript = tmp_path / "odd.jsonl"
    transcript.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(ValidationFailed) as caught:
        service.import_jsonl("fresh", transcript, session_id="s1")
    assert caught.value.message.startswith(expected)
    assert not service.projects.exists("fresh")


def test_a_bad_project_name_is_reported_before_the_transcript_is_read(service: Obsmem, tmp_path) -> None:  # type: ignore[no-untyped-def]
    transcript = tmp_path / "bad.jsonl"
    transcript.write_text('{"role": "robot"}\n', encoding="utf-8")
    with pytest.raises(ValidationFailed) as caught:
        service.import_jsonl("../etc", transcript, session_id="s1")
    assert caught.value.code == "invalid_project"


def test_every_event_field_is_redacted_before_it_is_stored(service: Obsmem) -> None:
    key = "ghp_" + "Zk9QmT3vLp8R" * 3
    split_aws = "AKIA\u200bIOSFODNN7EXAMPLE"
    service.append_events(
        "p",
        "s1",
        [
            {
                "role": "assistant",
                "type": "tool_call",
                "tool_name": f"run_with_{key}",
                "tool_call_id": f"call-{key}",
                "tool_args": {key: "value", "env": {"DB_PASS": "x"}, "cmd": f"aws --key {split_aws}"},
            },
            {"role": "tool", "type": "tool_result", "tool_name": "bash", "content": "export NAME_PASS=Zr81kq4wLm"},
            {"role": "user", "content": "my password is swordfish, do not store it"},
        ],
    )
    rows = service.database("p").query("SELECT tool_name, tool_call_id, tool_args, content FROM events ORDER BY seq")
    stored = json.dumps(rows, ensure_ascii=False)
    for secret in (key, "IOSFODNN7EXAMPLE", "Zr81kq4wLm", "swordfish", '"x"'):
        assert secret not in stored, secret
    assert rows[0][0] == "run_with_[REDACTED:github_token]" and rows[0][1] == "call-[REDACTED:github_token]"
    assert json.loads(rows[0][2]) == {
        "[REDACTED:github_token]": "value",
        "cmd": "aws --key [REDACTED:aws_access_key]",
        "env": {"DB_PASS": "[REDACTED:secret]"},
    }
    assert rows[2][3] == "my password is [REDACTED:secret], do not store it"


def test_an_event_with_a_redacted_field_is_still_an_idempotent_append(service: Obsmem) -> None:
    event = {"seq": 1, "role": "assistant", "type": "tool_call", "tool_name": "sk-proj-" + "a1" * 12}
    service.append_events("p", "s1", [event])
    assert service.append_events("p", "s1", [event]).duplicates == 1


@pytest.mark.parametrize(
    "session",
    [
        "sk-proj-Xq7Lm2Pz9Rt4Vb6Nc8Kd1Fg3Hj5",
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        "AKIAIOSFODNN7EXAMPLE",
        "xoxb-2048-4096-Zk9QmT3vLp8R",
        "password:hunter22",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ],
)
def test_session_ids_that_look_like_secrets_are_refused_not_stored(service: Obsmem, session: str) -> None:
    with pytest.raises(InvalidSession) as caught:
        service.append_events("p", session, [{"role": "user", "content": "a"}])
    assert "looks like a secret" in caught.value.message and session not in caught.value.message
    assert caught.value.code == "invalid_session" and caught.value.field == "session_id"
    assert not service.projects.exists("p")


@pytest.mark.parametrize(
    "session", ["s1", "123e4567-e89b-12d3-a456-426614174000", "9fceb02d0ae598e95dc970b74767f19372d61af8", "a" * 64]
)
def test_ordinary_session_ids_are_accepted(service: Obsmem, session: str) -> None:
    assert service.append_events("p", session, [{"role": "user", "content": "a"}]).appended == 1


def test_an_import_receipt_totals_each_session_across_batches_in_the_same_json(service: Obsmem, tmp_path) -> None:  # type: ignore[no-untyped-def]
    service.append_events("p", "s2", [{"role": "user", "content": "already here"}])
    lines = [{"role": "user", "content": f"turn {n}", "session_id": "s1"} for n in range(BATCH_SIZE + 3)]
    lines.append({"role": "user", "content": "already here", "session_id": "s2", "seq": 1})
    transcript = tmp_path / "two.jsonl"
    transcript.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    receipt = service.import_jsonl("p", transcript)
    assert receipt.sessions == {
        "s1": SessionTotals(appended=BATCH_SIZE + 3, duplicates=0, last_seq=BATCH_SIZE + 3),
        "s2": SessionTotals(appended=0, duplicates=1, last_seq=1),
    }
    assert json.dumps(receipt.to_dict()) == json.dumps(
        {
            "events": BATCH_SIZE + 4,
            "appended": BATCH_SIZE + 3,
            "duplicates": 1,
            "sessions": {
                "s1": {"appended": BATCH_SIZE + 3, "duplicates": 0, "last_seq": BATCH_SIZE + 3},
                "s2": {"appended": 0, "duplicates": 1, "last_seq": 1},
            },
            "problems": {},
            "problem_lines": [],
        }
    )
