"""Claude Code transcripts: counts, mapping, idempotence, growth, rewrites, bad input and redaction."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from obsmem.app import Obsmem
from obsmem.errors import ValidationFailed
from obsmem.settings import load_settings
from obsmem.transcripts import files as transcript_files
from obsmem.transcripts import importer
from support.pipeline_service import pipeline_service
from support.scripted_chat import ScriptedChatServer
from support.transcripts import copy_fixture, stored_events, write_jsonl

SESSION = "1f0c2a6e-8d3b-4c55-9a61-0b7e2f1d9a01"
RESUMED = "7b2d9e44-0a1c-4f6e-8b3d-5c9f1e2a7d02"
SUBAGENT = f"{SESSION}:agent-a91f3c"


@pytest.fixture
def projects(tmp_path: Path) -> Path:
    return copy_fixture("claude-code", tmp_path) / "projects"


def files(projects: Path) -> list[Path]:
    return sorted(projects.rglob("*.jsonl"))


def test_a_full_import_maps_sessions_sub_agents_and_skips_by_type(
    service: Obsmem, projects: Path, tmp_path: Path
) -> None:
    run = service.import_transcripts("claude-code", files(projects))
    assert run.problems == 0
    assert run.added == 25
    events = stored_events(tmp_path / "data", "shop")  # the slug of the recorded cwd /home/ann/src/shop
    sessions = {row[0] for row in events}
    assert sessions == {SESSION, RESUMED, SUBAGENT}
    main = [row for row in events if row[0] == SESSION]
    assert [row[1] for row in main] == list(range(1, 16))
    assert main[0][2:4] == ("user", "message") and "KeyError" in main[0][4]
    call = main[2]
    assert call[2:4] == ("assistant", "tool_call") and call[5] == "Bash"
    assert json.loads(call[6]) == {"command": "pytest tests/test_checkout.py -q", "description": "Run checkout tests"}
    result = main[3]
    assert result[2:4] == ("tool", "tool_result") and result[5] == "Bash" and result[7] == "toolu_01"
    assert result[4].endswith("characters not stored]") and len(result[4]) < 20_200  # the long output is cut
    assert main[5][4].startswith("[error] ") and main[5][5] == "Read"  # a failed tool call
    assert main[9][2:][:2] == ("system", "message") and main[9][4].startswith("[compaction]")
    assert main[10][4].startswith("[compaction summary]")
    skipped: dict[str, int] = {}
    for report in run.files:
        for reason, count in report.skipped.items():
            skipped[reason] = skipped.get(reason, 0) + count
    assert skipped == {
        "file-history-snapshot": 1,
        "meta": 2,
        "summary": 1,
        "system:informational": 1,
        "thinking": 2,
        "queue-operation": 1,
    }
    assert [row[4] for row in events if row[0] == SUBAGENT][0].startswith("Find where the currency key")


def test_secrets_are_redacted_on_the_way_in(service: Obsmem, projects: Path, tmp_path: Path) -> None:
    service.import_transcripts("claude-code", files(projects))
    texts = " ".join(str(row[4]) + str(row[6]) for row in stored_events(tmp_path / "data", "shop"))
    assert "AKIAIOSFODNN7EXAMPLE" not in texts and "[REDACTED:" in texts


def test_a_second_import_stores_nothing_and_reads_nothing(service: Obsmem, projects: Path, tmp_path: Path) -> None:
    service.import_transcripts("claude-code", files(projects))
    before = stored_events(tmp_path / "data", "shop")
    again = service.import_transcripts("claude-code", files(projects))
    assert again.added == 0 and {f.status for f in again.files} == {"unchanged"}
    assert stored_events(tmp_path / "data", "shop") == before


def test_growth_imports_only_the_new_records(service: Obsmem, projects: Path, tmp_path: Path) -> None:
    path = projects / "-home-ann-src-shop" / f"{RESUMED}.jsonl"
    service.import_transcripts("claude-code", [path])
    line = {
        "type": "user",
        "sessionId": RESUMED,
        "uuid": "r9",
        "parentUuid": "r6",
        "cwd": "/home/ann/src/shop",
        "timestamp": "2025-03-03T08:05:00.000Z",
        "message": {"role": "user", "content": "Thanks, ship it."},
    }
    write_jsonl(path, [line], mode="a")
    grown = service.import_transcripts("claude-code", [path])
    assert grown.added == 1 and grown.duplicates == 0 and grown.files[0].bytes_read == len(json.dumps(line)) + 1
    last = stored_events(tmp_path / "data", "shop")[-1]
    assert last[:2] == (RESUMED, 7) and last[4] == "Thanks, ship it."


def test_a_line_still_being_written_waits_for_its_newline(service: Obsmem, projects: Path, tmp_path: Path) -> None:
    path = projects / "-home-ann-src-shop" / f"{RESUMED}.jsonl"
    record = json.dumps(
        {
            "type": "user",
            "sessionId": RESUMED,
            "uuid": "r9",
            "parentUuid": "r6",
            "message": {"role": "user", "content": "half"},
        }
    )
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(record[:30])
    assert service.import_transcripts("claude-code", [path]).added == 6
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(record[30:] + "\n")
    finished = service.import_transcripts("claude-code", [path])
    assert finished.added == 1 and finished.problems == 0


def test_a_truncated_or_rewritten_file_is_merged_without_duplicates(
    service: Obsmem, projects: Path, tmp_path: Path
) -> None:
    path = projects / "-home-ann-src-shop" / f"{RESUMED}.jsonl"
    service.import_transcripts("claude-code", [path])
    lines = path.read_text(encoding="utf-8").splitlines()
    # The agent rewrote the file: the first lines kept, the last reply replaced by another record.
    replaced = json.loads(lines[6])
    replaced["uuid"] = "r7"
    replaced["message"]["content"] = [{"type": "text", "text": "Fixed: RATES now has the default currency."}]
    path.write_text("\n".join([*lines[:6], json.dumps(replaced)]) + "\n", encoding="utf-8")
    run = service.import_transcripts("claude-code", [path])
    report = run.files[0]
    assert report.status == "rewritten" and run.added == 1 and run.duplicates == 0
    assert report.skipped["duplicate_record"] == 5  # the records kept were imported before
    events = [row for row in stored_events(tmp_path / "data", "shop") if row[0] == RESUMED]
    assert [row[1] for row in events] == list(range(1, 8))
    assert events[-1][4] == "Fixed: RATES now has the default currency."
    # Truncated to its first lines: nothing new, nothing removed.
    path.write_text("\n".join(lines[:3]) + "\n", encoding="utf-8")
    truncated = service.import_transcripts("claude-code", [path])
    assert truncated.added == 0 and truncated.files[0].status == "rewritten"
    assert len([row for row in stored_events(tmp_path / "data", "shop") if row[0] == RESUMED]) == 7


def test_a_resumed_session_that_replays_the_earlier_one_stores_only_its_own_records(
    service: Obsmem, projects: Path, tmp_path: Path
) -> None:
    earlier = projects / "-home-ann-src-shop" / f"{RESUMED}.jsonl"
    service.import_transcripts("claude-code", [earlier])
    later_id = "0d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6"
    replay = [{**json.loads(line), "sessionId": later_id} for line in earlier.read_text(encoding="utf-8").splitlines()]
    own = {"type": "user", "sessionId": later_id, "uuid": "n1", "parentUuid": "r6", "cwd": "/home/ann/src/shop",
           "message": {"role": "user", "content": "Picking this up again: deploy it."}}  # fmt: skip
    repeated = json.dumps(own)
    later = write_jsonl(earlier.with_name(f"{later_id}.jsonl"), [*replay, own, repeated])
    run = service.import_transcripts("claude-code", [later])
    report = run.files[0]
    assert run.added == 1 and report.skipped["replayed"] == 6 and report.skipped["duplicate_record"] == 1
    rows = [row for row in stored_events(tmp_path / "data", "shop") if row[0] == later_id]
    assert [(row[1], row[4]) for row in rows] == [(1, "Picking this up again: deploy it.")]


def test_project_map_and_project_override(tmp_path: Path, projects: Path) -> None:
    settings = load_settings(data_dir=tmp_path / "data", transcripts={"project_map": {"/home/ann/src": "ann-code"}})
    with Obsmem(settings) as memory:
        run = memory.import_transcripts("claude-code", files(projects))
        assert {p for f in run.files for p in f.projects} == {"ann-code"}
        other = memory.import_transcripts("claude-code", files(projects)[:1], project="elsewhere")
        assert other.files[0].projects == {"elsewhere"} and other.added == 4


BAD_LINES: list[tuple[str, str]] = [
    ("{not json", "malformed_json"),
    ('["a list"]', "not_an_object"),
    ('{"type": "hologram", "sessionId": "s"}', "unknown_type"),
    (
        '{"type": "user", "sessionId": "'
        + SESSION
        + '", "uuid": "q1", "parentUuid": "nowhere", "message": {"role": "user", "content": "orphan"}}',
        "missing_parent",
    ),
    (
        '{"type": "user", "sessionId": "'
        + SESSION
        + '", "uuid": "q2", "message": {"role": "user", "content": "'
        + "x" * 2_000_001
        + '"}}',
        "invalid_event",
    ),
]


def test_bad_lines_are_counted_and_named_and_the_rest_is_imported(service: Obsmem, tmp_path: Path) -> None:
    path = tmp_path / "claude" / "bad.jsonl"
    good = {
        "type": "user",
        "sessionId": SESSION,
        "uuid": "g1",
        "cwd": "/w/demo",
        "message": {"role": "user", "content": "first"},
    }
    last = {
        "type": "user",
        "sessionId": SESSION,
        "uuid": "g2",
        "parentUuid": "g1",
        "message": {"role": "user", "content": "last"},
    }
    write_jsonl(path, [good, *(line for line, _ in BAD_LINES), last])
    with open(path, "ab") as handle:
        handle.write(b'{"type": "user", "sessionId": "s", "message": {"content": "\xff\xfe"}}\n')
    run = service.import_transcripts("claude-code", [path])
    report = run.files[0]
    assert dict(report.problems) == {reason: 1 for _, reason in BAD_LINES} | {"invalid_utf8": 1}
    assert {(p.reason, p.line) for p in report.listed} == {
        ("malformed_json", 2),
        ("not_an_object", 3),
        ("unknown_type", 4),
        ("missing_parent", 5),
        ("invalid_event", 6),
        ("invalid_utf8", 8),
    }
    contents = [row[4] for row in stored_events(tmp_path / "data", "demo")]
    assert contents == ["first", "orphan", "last"]  # the orphan is stored and reported; nothing is half-stored
    assert all("x" * 50 not in p.detail for p in report.listed)  # no record text in the report


def test_tool_input_nested_past_the_limit_is_a_problem_of_its_line_and_the_rest_is_imported(
    service: Obsmem, tmp_path: Path
) -> None:
    """Redaction walks arguments recursively: input nested hundreds of levels deep once stopped the whole
    import with a RecursionError. It is refused where every event comes in, so only its line is lost."""
    deep: list[Any] = []
    for _ in range(600):
        deep = [deep]
    first = {
        "type": "user",
        "sessionId": SESSION,
        "uuid": "d1",
        "cwd": "/w/demo",
        "message": {"role": "user", "content": "first"},
    }
    call = {
        "type": "assistant",
        "sessionId": SESSION,
        "uuid": "d2",
        "parentUuid": "d1",
        "message": {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"a": deep}}],
        },
    }
    last = {
        "type": "user",
        "sessionId": SESSION,
        "uuid": "d3",
        "parentUuid": "d2",
        "message": {"role": "user", "content": "last"},
    }
    path = tmp_path / "claude" / "deep.jsonl"
    write_jsonl(path, [first, call, last])
    other = tmp_path / "claude" / "other.jsonl"
    write_jsonl(other, [dict(first, sessionId="e0c9a7a1-0000-4000-8000-000000000002", uuid="o1")])
    run = service.import_transcripts("claude-code", [path, other])
    assert [(p.reason, p.line) for p in run.files[0].listed] == [("invalid_event", 2)]
    assert "nested more than 64 levels" in run.files[0].listed[0].detail
    assert run.files[1].status == "imported" and run.added == 3
    assert [row[4] for row in stored_events(tmp_path / "data", "demo")] == ["first", "last", "first"]


def test_a_number_past_what_python_reads_is_a_malformed_line(service: Obsmem, tmp_path: Path) -> None:
    """json refuses integers of more than 4,300 digits with a ValueError that is no JSONDecodeError: once a
    traceback that stopped the import."""
    first = {
        "type": "user",
        "sessionId": SESSION,
        "uuid": "n1",
        "cwd": "/w/demo",
        "message": {"role": "user", "content": "kept"},
    }
    path = tmp_path / "claude" / "numbers.jsonl"
    write_jsonl(path, [first, '{"type": "user", "n": ' + "9" * 5000 + "}"])
    run = service.import_transcripts("claude-code", [path])
    assert [(p.reason, p.line, p.detail) for p in run.files[0].listed] == [
        ("malformed_json", 2, "not valid JSON (a number too long to read)")
    ]
    assert run.added == 1


def test_a_receipt_never_names_a_session_id_it_refused(service: Obsmem, tmp_path: Path) -> None:
    """A transcript's session id may hold anything, a pasted credential too: refused ids are a problem of
    their line, and the receipt lists only the sessions it stored under."""
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    good = {
        "type": "user",
        "sessionId": SESSION,
        "uuid": "k1",
        "cwd": "/w/demo",
        "message": {"role": "user", "content": "kept"},
    }
    bad = [
        dict(good, sessionId=f"token {token} here", uuid="k2"),
        dict(good, sessionId="../../evil", uuid="k3"),
    ]
    path = tmp_path / "claude" / "mixed.jsonl"
    write_jsonl(path, [good, *bad])
    run = service.import_transcripts("claude-code", [path])
    report = run.files[0].to_dict()
    assert report["session_ids"] == [SESSION] and report["sessions"] == 1, report
    assert sorted(p.reason for p in run.files[0].listed) == ["invalid_session", "invalid_session"]
    assert token not in json.dumps(run.to_dict()) and "evil" not in json.dumps(run.to_dict())


def test_a_file_that_disappears_is_reported_and_the_others_imported(service: Obsmem, projects: Path) -> None:
    gone = projects / "gone.jsonl"
    run = service.import_transcripts("claude-code", [gone, *files(projects)])
    assert run.files[0].status == "missing" and run.files[0].problems == {"file_missing": 1}
    assert run.added == 25


# -- property: any interleaving of appends and imports equals one import of the final file --------------


def _record(index: int, kind: str) -> dict[str, Any]:
    base: dict[str, Any] = {
        "sessionId": "prop",
        "uuid": f"u{index}",
        "cwd": "/w/prop",
        "timestamp": f"2025-01-01T00:00:{index % 60:02d}Z",
    }
    if index:
        base["parentUuid"] = f"u{index - 1}"
    if kind == "user":
        return {**base, "type": "user", "message": {"role": "user", "content": f"question {index}"}}
    if kind == "call":
        content = [
            {"type": "text", "text": f"running {index}"},
            {"type": "tool_use", "id": f"t{index}", "name": "Bash", "input": {"n": index}},
        ]
        return {**base, "type": "assistant", "message": {"role": "assistant", "content": content}}
    if kind == "result":
        return {
            **base,
            "type": "user",
            "message": {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"t{index - 1}", "content": f"ok {index}"}],
            },
        }
    return {**base, "type": "progress", "data": {}}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kinds=st.lists(st.sampled_from(["user", "call", "result", "noise"]), min_size=1, max_size=30),
    cuts=st.lists(st.integers(min_value=0, max_value=30), max_size=6),
    partial=st.booleans(),
)
def test_interleaved_appends_and_imports_equal_one_import(
    tmp_path_factory: pytest.TempPathFactory, kinds: list[str], cuts: list[int], partial: bool
) -> None:
    root = tmp_path_factory.mktemp("prop")
    lines = [json.dumps(_record(i, kind)) + "\n" for i, kind in enumerate(kinds)]
    growing, whole = root / "growing" / "s.jsonl", root / "whole" / "s.jsonl"
    growing.parent.mkdir()
    whole.parent.mkdir()
    whole.write_text("".join(lines), encoding="utf-8")
    with Obsmem(load_settings(data_dir=root / "a")) as stepwise, Obsmem(load_settings(data_dir=root / "b")) as once:
        written = 0
        for cut in sorted(min(c, len(lines)) for c in cuts):
            text = "".join(lines[written:cut])
            with open(growing, "a", encoding="utf-8") as handle:
                handle.write(text)
                if partial and cut < len(lines):
                    handle.write(lines[cut][:7])  # a line caught half-written
            written = max(written, cut)
            stepwise.import_transcripts("claude-code", [growing])
            if partial and cut < len(lines):
                growing.write_bytes(growing.read_bytes()[:-7])  # the writer's buffer, flushed whole below
        with open(growing, "a", encoding="utf-8") as handle:
            handle.write("".join(lines[written:]))
        stepwise.import_transcripts("claude-code", [growing])
        once.import_transcripts("claude-code", [whole])
    # A file with no events (noise only) stores nothing, and so creates no project, either way.
    made = [(data / "projects" / "prop").exists() for data in (root / "a", root / "b")]
    assert made in ([True, True], [False, False]) and made[0] == any(kind != "noise" for kind in kinds)
    if made[0]:
        assert stored_events(root / "a", "prop") == stored_events(root / "b", "prop")


def test_a_file_deleted_while_it_is_read_keeps_what_was_read(
    service: Obsmem, projects: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = projects / "-home-ann-src-shop" / f"{SESSION}.jsonl"
    monkeypatch.setattr(importer, "CHUNK_EVENTS", 3)  # a watermark every few events, so the deletion lands mid-file
    deleted: list[str] = []

    def delete_once(name: str, done: int, total: int) -> None:
        if not deleted:
            deleted.append(name)
            Path(name).unlink()

    run = service.import_transcripts("claude-code", [path], progress=delete_once)
    report = run.files[0]
    assert deleted and report.status == "missing" and report.problems == {"file_missing": 1}
    assert report.added == 15  # the open file was read to its end; every complete record is stored once
    assert len([row for row in stored_events(tmp_path / "data", "shop") if row[0] == SESSION]) == 15


def test_seqs_depend_on_the_file_alone_so_a_lost_watermark_stores_nothing_twice(
    service: Obsmem, projects: Path, tmp_path: Path
) -> None:
    service.import_transcripts("claude-code", files(projects))
    before = stored_events(tmp_path / "data", "shop")
    with service.database("shop").write() as conn:  # as if the process died before saving any import state
        conn.execute("DELETE FROM import_files")
        conn.execute("DELETE FROM import_records")
    again = service.import_transcripts("claude-code", files(projects))
    assert again.added == 0 and again.duplicates == 25
    assert stored_events(tmp_path / "data", "shop") == before
    with service.database("shop").write() as conn:  # the watermarks alone lost: the record ids still hold
        conn.execute("DELETE FROM import_files")
    third = service.import_transcripts("claude-code", files(projects))
    assert third.added == 0 and stored_events(tmp_path / "data", "shop") == before


def test_a_session_already_fed_by_another_source_is_merged(service: Obsmem, projects: Path, tmp_path: Path) -> None:
    service.append_events("shop", RESUMED, [{"role": "user", "content": "typed in by hand first"}])
    path = projects / "-home-ann-src-shop" / f"{RESUMED}.jsonl"
    run = service.import_transcripts("claude-code", [path])
    assert run.added == 6 and run.problems == 0
    rows = [row for row in stored_events(tmp_path / "data", "shop") if row[0] == RESUMED]
    assert [row[1] for row in rows] == list(range(1, 8)) and rows[0][4] == "typed in by hand first"
    assert service.import_transcripts("claude-code", [path]).added == 0


def test_imports_go_through_the_append_path_so_observation_is_queued(
    tmp_path: Path, projects: Path, server: ScriptedChatServer
) -> None:
    # The scripted model on loopback (not called: no worker runs here) and a small buffer.
    with pipeline_service(tmp_path / "data", server) as memory:
        memory.import_transcripts("claude-code", files(projects))
        queued = memory.jobs("shop").to_dict()["jobs"]
    assert any(job["kind"] == "observe" and SESSION in job["order_key"] for job in queued), queued


def test_an_unreadable_timestamp_keeps_the_event(service: Obsmem, tmp_path: Path) -> None:
    record = {"type": "user", "sessionId": "t", "cwd": "/w/stamps", "message": {"role": "user", "content": "kept"}}
    path = write_jsonl(tmp_path / "t.jsonl", [{**record, "timestamp": "yesterday-ish"}])
    report = service.import_transcripts("claude-code", [path]).files[0]
    assert report.problems == {"invalid_timestamp": 1} and report.added == 1
    assert [row[4] for row in stored_events(tmp_path / "data", "stamps")] == ["kept"]


def test_an_unknown_source_is_a_validation_error(service: Obsmem, projects: Path) -> None:
    with pytest.raises(ValidationFailed) as caught:
        service.import_transcripts("cursor", files(projects))
    assert caught.value.field == "source" and "claude-code" in caught.value.message


def test_a_parent_that_is_a_bookkeeping_record_is_not_missing(service: Obsmem, tmp_path: Path) -> None:
    records = [
        {
            "type": "user",
            "sessionId": "b",
            "uuid": "u1",
            "cwd": "/w/books",
            "message": {"role": "user", "content": "a"},
        },
        {"type": "progress", "sessionId": "b", "uuid": "p1", "parentUuid": "u1", "data": {}},
        {
            "type": "user",
            "sessionId": "b",
            "uuid": "u2",
            "parentUuid": "p1",
            "message": {"role": "user", "content": "b"},
        },
    ]
    report = service.import_transcripts("claude-code", [write_jsonl(tmp_path / "b.jsonl", records)]).files[0]
    assert report.problems == {} and report.added == 2 and report.skipped == {"progress": 1}


def _said(uuid: str, parent: str | None, role: str, text: str) -> dict[str, Any]:
    return {
        "type": role,
        "sessionId": "s-rewrite",
        "uuid": uuid,
        "parentUuid": parent,
        "cwd": "/w/rewrite",
        "message": {"role": role, "content": text},
    }


def test_a_rewritten_file_stores_a_new_record_that_repeats_an_earlier_text(service: Obsmem, tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "s-rewrite.jsonl", [_said("u1", None, "user", "hello"), _said("u2", "u1", "user", "yes")]
    )
    assert service.import_transcripts("claude-code", [path]).added == 2
    # The agent re-serialises the same records (another key order) and adds one that says "yes" again.
    records = [_said("u1", None, "user", "hello"), _said("u2", "u1", "user", "yes"), _said("u3", "u2", "user", "yes")]
    path.write_text("".join(json.dumps(dict(reversed(r.items()))) + "\n" for r in records), encoding="utf-8")
    run = service.import_transcripts("claude-code", [path])
    assert run.files[0].status == "rewritten"
    assert (run.added, run.duplicates, run.files[0].skipped["duplicate_record"]) == (1, 0, 2)
    assert [row[4] for row in stored_events(tmp_path / "data", "rewrite")] == ["hello", "yes", "yes"]


def test_a_failing_project_database_fails_its_file_and_the_others_import(service: Obsmem, tmp_path: Path) -> None:
    broken = tmp_path / "data" / "projects" / "broken" / "obsmem.db"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"not a database " * 512)
    first = write_jsonl(tmp_path / "a.jsonl", [{**_said("a1", None, "user", "lost"), "cwd": "/w/broken"}])
    second = write_jsonl(tmp_path / "b.jsonl", [{**_said("b1", None, "user", "kept"), "cwd": "/w/fine"}])
    run = service.import_transcripts("claude-code", [first, second])
    assert run.files[0].status == "failed" and run.files[0].problems == {"storage_corrupt": 1}
    assert "lost" not in json.dumps(run.to_dict())  # the reason, never the record text
    assert run.files[1].added == 1 and [row[4] for row in stored_events(tmp_path / "data", "fine")] == ["kept"]


def test_api_errors_are_stored_as_error_events_not_replies(service: Obsmem, tmp_path: Path) -> None:
    api_error_reply = {
        **_said("e2", "e1", "assistant", ""),
        "isApiErrorMessage": True,
        "message": {
            "role": "assistant",
            "model": "<synthetic>",
            "content": [{"type": "text", "text": "API Error: 529 Overloaded"}],
        },
    }
    retrying = {
        "type": "system",
        "subtype": "api_error",
        "level": "error",
        "sessionId": "s-rewrite",
        "uuid": "e3",
        "parentUuid": "e2",
        "cwd": "/w/rewrite",
        "error": {"status": 529, "error": {"error": {"type": "overloaded_error", "message": "Overloaded"}}},
        "retryAttempt": 2,
        "maxRetries": 10,
    }
    path = write_jsonl(tmp_path / "s-rewrite.jsonl", [_said("e1", None, "user", "go"), api_error_reply, retrying])
    run = service.import_transcripts("claude-code", [path])
    assert run.problems == 0 and not run.files[0].skipped
    rows = stored_events(tmp_path / "data", "rewrite")
    assert [row[2:5] for row in rows[1:]] == [
        ("system", "message", "[error] API Error: 529 Overloaded"),
        ("system", "message", "[error] API error 529: Overloaded (retry 2 of 10)"),
    ]


def test_an_unchanged_file_is_passed_over_without_being_opened(
    service: Obsmem, projects: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service.import_transcripts("claude-code", files(projects))
    opened: list[Path] = []
    real_open = transcript_files.open_text_bytes

    def spy(path: Path) -> Any:
        opened.append(path)
        return real_open(path)

    monkeypatch.setattr(transcript_files, "open_text_bytes", spy)
    again = service.import_transcripts("claude-code", files(projects))  # as each --follow round does
    assert {f.status for f in again.files} == {"unchanged"} and opened == []
    grown = projects / "-home-ann-src-shop" / f"{RESUMED}.jsonl"
    with open(grown, "a", encoding="utf-8") as handle:
        handle.write("\n")
    service.import_transcripts("claude-code", files(projects))
    assert set(opened) == {grown}  # only the file that changed is read


def test_a_record_id_that_cannot_be_stored_imports_the_record_without_it(service: Obsmem, tmp_path: Path) -> None:
    # A lone surrogate in a uuid cannot be stored in import_records: the file (and every file after it) failed
    # with a traceback after its events were stored, and again on every run.
    base = {"type": "user", "sessionId": "odd-ids", "cwd": "/w/odd"}
    records = [
        {**base, "uuid": "\ud800abc", "message": {"role": "user", "content": "lone surrogate"}},
        {**base, "uuid": "u" * 10_000, "message": {"role": "user", "content": "far too long"}},
        {**base, "uuid": "u-3", "message": {"role": "user", "content": "fine"}},
    ]
    odd = write_jsonl(tmp_path / "odd.jsonl", records)
    after = write_jsonl(
        tmp_path / "after.jsonl", [{**base, "sessionId": "after", "message": {"role": "user", "content": "x"}}]
    )
    run = service.import_transcripts("claude-code", [odd, after])
    assert [(report.status, report.added) for report in run.files] == [("imported", 3), ("imported", 1)]
    assert service.import_transcripts("claude-code", [odd, after]).added == 0
