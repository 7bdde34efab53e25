"""Project export files: their shape, every refusal (newer version, cut short, altered, not an export, a
project with data, a row the schema refuses, a table no rule covers), round trips of random small
projects, and the `obsmem export` / `obsmem restore` commands."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from obsmem.app import Obsmem
from obsmem.errors import (
    ExportChecksumMismatch,
    ExportIncomplete,
    ExportInvalid,
    ExportTruncated,
    ExportVersionUnsupported,
    ObsmemError,
    ProjectNotEmpty,
)
from obsmem.exporting import FORMAT_VERSION, KINDS, export_project, restore_project
from obsmem.exporting.rows import decode_value, encode_value
from obsmem.ids import observation_id
from obsmem.memories import ReflectionIn, add_reflection
from obsmem.surfaces.cli import cli
from support.judgments import record_judged
from support.transcripts import copy_fixture

SECRET_TEXT = "the staging password rotation happens on fridays"


def small_project(service: Obsmem, project: str = "src") -> None:
    service.append_events(
        project,
        "s1",
        [
            {"role": "user", "content": SECRET_TEXT, "created_at": "2026-03-01T10:00:00Z"},
            {"role": "assistant", "type": "tool_call", "tool_name": "bash", "tool_args": {"cmd": "ls -la"}},
            {"role": "tool", "type": "tool_result", "content": "total 0", "tool_name": "bash"},
        ],
    )
    service.append_events(project, "s2", [{"role": "user", "content": "deploy the ledger service"}])
    written = service.add_observations(
        project,
        [
            {
                "session_id": "s1",
                "content": "Staging passwords rotate on Fridays",
                "timestamp": "2026-03-01 10:00",
                "source_refs": [1, 3],
            },
            {
                "session_id": "s2",
                "content": "User asked to deploy the ledger service",
                "timestamp": "2026-03-02 09:30",
                "source_refs": [1],
                "importance": "high",
            },
        ],
    )
    assert not written.rejected


def exported(service: Obsmem, project: str = "src") -> bytes:
    path = service.settings.data_dir / f"{project}.export"
    with path.open("wb") as out:
        export_project(service, project, out)
    return path.read_bytes()


def without_the_clock(export: bytes) -> tuple[dict[str, Any], list[bytes], dict[str, Any]]:
    """An export file less what depends on when it was written: the header's ``created_at`` (to the second)
    and the trailer's checksum, which covers the header. Two exports of the same project a second apart
    differ in those and nowhere else."""
    lines = export.splitlines()
    header, trailer = orjson.loads(lines[0]), orjson.loads(lines[-1])
    del header["created_at"], trailer["sha256"]
    return header, lines[1:-1], trailer


def forge(lines: list[bytes]) -> bytes:
    """A file from a header and records with a trailer that matches them (a forger's, or a future writer's)."""
    counts: dict[str, int] = {entry["kind"]: 0 for entry in orjson.loads(lines[0])["tables"]}
    for line in lines[1:]:
        kind = orjson.loads(line)["kind"]
        counts[kind] = counts.get(kind, 0) + 1
    body = b"".join(line + b"\n" for line in lines)
    trailer = {"kind": "end", "counts": counts, "records": len(lines) - 1, "sha256": hashlib.sha256(body).hexdigest()}
    return body + orjson.dumps(trailer) + b"\n"


# Derived from the rest of the database and left out of exports (docs/export-format.md): a restore's
# catch-up sets it anew, so a restored copy may be further along than its source.
DERIVED = {("events", "in_date_order")}


def canonical_rows(service: Obsmem, project: str) -> dict[str, list[tuple[Any, ...]]]:
    db = service.database(project)
    rows = {}
    for kind in KINDS:
        where = f" WHERE {kind.where}" if kind.where else ""
        names = [row[1] for row in db.query(f'PRAGMA table_info("{kind.table}")')]
        columns = ", ".join(f'"{name}"' for name in names if (kind.table, name) not in DERIVED)
        rows[kind.name] = db.query(f'SELECT {columns} FROM "{kind.table}"{where} ORDER BY 1, 2')
    return rows


def nothing_restored(service: Obsmem, project: str) -> bool:
    if not service.projects.exists(project):
        return True
    return all(not rows for rows in canonical_rows(service, project).values())


# -- the file ------------------------------------------------------------------------------------------------


def test_the_file_is_a_header_records_grouped_by_kind_and_a_checksummed_trailer(service: Obsmem) -> None:
    small_project(service)
    lines = exported(service).splitlines(keepends=True)
    header, records, trailer = orjson.loads(lines[0]), [orjson.loads(x) for x in lines[1:-1]], orjson.loads(lines[-1])
    assert header["format"] == "obsmem-export" and header["version"] == FORMAT_VERSION == 1
    assert header["project"] == "src" and header["obsmem"] and header["created_at"].endswith("Z")
    assert [entry["kind"] for entry in header["tables"]] == [kind.name for kind in KINDS]
    order = [entry["kind"] for entry in header["tables"]]
    kinds = [record["kind"] for record in records]
    assert kinds == sorted(kinds, key=order.index), "records are grouped by kind in the header's order"
    assert {"session": 2, "event": 4, "observation": 2, "observation_source": 3}.items() <= trailer["counts"].items()
    assert trailer["records"] == len(records) == sum(trailer["counts"].values())
    assert trailer["sha256"] == hashlib.sha256(b"".join(lines[:-1])).hexdigest()
    event = next(record["row"] for record in records if record["kind"] == "event")
    assert event["seq"] == 1 and event["content"] == SECRET_TEXT and event["session_id"] == "s1"


def test_an_export_to_a_text_stream_holds_the_same_bytes(service: Obsmem, tmp_path: Path) -> None:
    small_project(service)
    binary = exported(service)
    with (tmp_path / "text.export").open("w", encoding="utf-8", newline="\n") as out:
        export_project(service, "src", out)
    text = (tmp_path / "text.export").read_bytes()
    assert without_the_clock(text) == without_the_clock(binary)


def test_blob_values_travel_as_base64_and_unknown_shapes_are_refused() -> None:
    blob = bytes(range(256))
    assert decode_value(orjson.loads(orjson.dumps(encode_value(blob))), 1) == blob
    for value in (None, 0, -(2**63), 2**63 - 1, 1.5, "", 'é\n"}'):
        assert decode_value(orjson.loads(orjson.dumps(encode_value(value))), 1) == value
    for bad in (True, [1], {"base64": "***"}, {"other": "x"}):
        with pytest.raises(ExportInvalid):
            decode_value(bad, 7)


# -- refusals ------------------------------------------------------------------------------------------------


def restore_bytes(service: Obsmem, data: bytes, project: str = "copy") -> Any:
    path = service.settings.data_dir / "incoming.export"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return restore_project(service, path, project)


def test_a_file_from_a_newer_format_version_is_refused_and_creates_nothing(service: Obsmem) -> None:
    small_project(service)
    lines = exported(service).splitlines()
    header = orjson.loads(lines[0]) | {"version": FORMAT_VERSION + 1}
    with pytest.raises(ExportVersionUnsupported, match=r"version 2; this obsmem reads versions up to 1"):
        restore_bytes(service, forge([orjson.dumps(header), *lines[1:-1]]))
    assert not service.projects.exists("copy")


def test_a_file_cut_anywhere_is_refused_and_creates_nothing(service: Obsmem) -> None:
    small_project(service)
    data = exported(service)
    line_ends = [i + 1 for i, byte in enumerate(data) if byte == ord("\n")][:-1]
    cuts = sorted({0, 1, *line_ends, *(end - 5 for end in line_ends), len(data) - 1})
    for cut in cuts:
        with pytest.raises(ExportTruncated):
            restore_bytes(service, data[:cut])
        assert not service.projects.exists("copy"), cut


def test_altered_records_fail_the_checksum(service: Obsmem) -> None:
    small_project(service)
    data = exported(service)
    altered = data.replace(b"deploy the ledger service", b"deploy the ledger servicf", 1)
    assert altered != data
    with pytest.raises(ExportChecksumMismatch) as caught:
        restore_bytes(service, altered)
    assert "ledger" not in caught.value.message
    assert not service.projects.exists("copy")


@pytest.mark.parametrize(
    "change",
    [
        "not_an_export",
        "unknown_kind",
        "kinds_out_of_order",
        "extra_column",
        "missing_column",
        "unknown_header_kind",
        "bool_value",
        "huge_integer",  # past 64 bits: once an OverflowError out of SQLite, a traceback
        "counts_disagree",
        "data_after_trailer",
    ],
)
def test_files_that_break_the_format_are_refused_and_create_nothing(service: Obsmem, change: str) -> None:
    small_project(service)
    lines = exported(service).splitlines()
    header, records = orjson.loads(lines[0]), [orjson.loads(line) for line in lines[1:-1]]
    if change == "not_an_export":
        data = b'{"role": "user", "content": "hello"}\n'
    elif change == "unknown_kind":
        data = forge([lines[0], *lines[1:-1], orjson.dumps({"kind": "wormhole", "row": {"a": 1}})])
    elif change == "kinds_out_of_order":
        data = forge([lines[0], *reversed(lines[1:-1])])
    elif change in ("extra_column", "missing_column", "bool_value", "huge_integer"):
        row = dict(records[0]["row"])
        if change == "extra_column":
            row["colour"] = "blue"
        elif change == "missing_column":
            row.pop(next(iter(row)))
        elif change == "bool_value":
            row["last_seq"] = True
        else:
            row["last_seq"] = 2**63 + 5
        data = forge([lines[0], orjson.dumps({"kind": records[0]["kind"], "row": row}), *lines[2:-1]])
    elif change == "unknown_header_kind":
        header["tables"].append({"kind": "wormhole", "table": "wormholes", "columns": ["a"]})
        data = forge([orjson.dumps(header), *lines[1:-1]])
    elif change == "counts_disagree":
        trailer = orjson.loads(lines[-1])
        trailer["counts"]["event"] += 1
        data = b"".join(line + b"\n" for line in lines[:-1]) + orjson.dumps(trailer) + b"\n"
    else:
        data = b"".join(line + b"\n" for line in lines) + lines[1] + b"\n"
    with pytest.raises(ExportInvalid) as caught:
        restore_bytes(service, data)
    assert type(caught.value) is ExportInvalid and caught.value.code == "export_invalid"
    assert not service.projects.exists("copy")


def test_a_row_the_schema_refuses_rolls_the_whole_restore_back(service: Obsmem) -> None:
    """A file whose checksum holds but whose rows break the schema (here an event cited twice over, at a
    taken id) is refused at that row, and nothing of the rows before it stays."""
    small_project(service)
    lines = exported(service).splitlines()
    first_event = next(i for i, line in enumerate(lines) if orjson.loads(line).get("kind") == "event")
    forged = forge([*lines[: first_event + 1], lines[first_event], *lines[first_event + 1 : -1]])
    with pytest.raises(ExportInvalid, match=rf"line {first_event + 2}: .*UNIQUE") as caught:
        restore_bytes(service, forged)
    assert SECRET_TEXT not in caught.value.message
    assert nothing_restored(service, "copy")


@pytest.mark.parametrize(
    "row",
    [
        {"name": "trust_ledger", "seq": 5},  # a table whose ids an export never carries: SQLite took any name
        {"name": "jobs", "seq": 2**63 - 1},  # every later job insert failed, reported as a full disk
    ],
)
def test_an_id_sequence_beyond_what_an_export_carries_is_refused(service: Obsmem, row: dict[str, Any]) -> None:
    small_project(service)
    lines = exported(service).splitlines()
    # id_sequence comes after every kind this project holds, before the trailer.
    forged = forge([*lines[:-1], orjson.dumps({"kind": "id_sequence", "row": row})])
    with pytest.raises(ExportInvalid, match="an id_sequence row"):
        restore_bytes(service, forged)
    assert nothing_restored(service, "copy")


def test_a_restore_redacts_as_every_write_does(service: Obsmem) -> None:
    """An export of obsmem holds redacted text, which a restore keeps as it is; an edited file (or one
    written before a detector existed) is redacted on the way in, and an event keeps a fingerprint that
    matches its text, so appending the same event again is a duplicate, not a conflict."""
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    small_project(service)
    lines = exported(service).splitlines()
    records = [orjson.loads(line) for line in lines[1:-1]]
    for record in records:
        row = record["row"]
        if record["kind"] == "event" and row["seq"] == 1 and row["session_id"] == "s2":
            row["content"] = f"deploy with {token}"
        if record["kind"] == "event" and row["tool_args"] is not None:
            row["tool_args"] = f'{{"cmd":"git push https://x:{token}@github.com"}}'
        if record["kind"] == "observation":
            row["content"] = f"{row['content']} {token}"
            # The id an obsmem without the token's detector made; the restore keeps it (rows cite it).
            refs = [
                (r["row"]["session_id"], r["row"]["seq"]) for r in records if r["row"].get("memory_row") == row["id"]
            ]
            row["memory_id"] = observation_id(row["session_id"], row["date"][:16], row["content"], refs)
    restore_bytes(service, forge([lines[0], *(orjson.dumps(record) for record in records)]))
    copy = service.settings.data_dir / "projects" / "copy" / "obsmem.db"
    assert token.encode() not in copy.read_bytes()
    assert service.search("copy", "[REDACTED:github_token]", scope="all").hits
    again = service.append_events("copy", "s2", [{"role": "user", "content": f"deploy with {token}", "seq": 1}])
    assert again.duplicates == 1 and again.appended == 0


def test_a_restore_redacts_a_judgments_query(service: Obsmem) -> None:
    """Judging redacts the search query it stores with a judgment (a query pasted with a credential in it), so
    a restore, a write too, redacts the query a file holds."""
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    small_project(service)
    note = service.save_note("src", "keep the runbook short").note.note_id
    with service.database("src").write() as conn:
        record_judged(conn, "j" + "1" * 16, note, "runbook length", "human", None, "escalate", None)
    lines = exported(service).splitlines()
    records = [orjson.loads(line) for line in lines[1:-1]]
    for record in records:
        if record["kind"] == "judgment":
            record["row"]["query"] = f"runbook length {token}"
    restore_bytes(service, forge([lines[0], *(orjson.dumps(record) for record in records)]))
    copy = service.settings.data_dir / "projects" / "copy" / "obsmem.db"
    assert token.encode() not in copy.read_bytes()
    assert service.database("copy").query("SELECT query FROM judgments") == [
        ("runbook length [REDACTED:github_token]",)
    ]


def test_an_event_whose_arguments_are_not_json_is_refused(service: Obsmem) -> None:
    """A recall parses every event's arguments: one that is not JSON broke recall of it and of what cites it."""
    small_project(service)
    lines = exported(service).splitlines()
    records = [orjson.loads(line) for line in lines[1:-1]]
    for record in records:
        if record["kind"] == "event" and record["row"]["tool_args"] is not None:
            record["row"]["tool_args"] = "{not json"
    with pytest.raises(ExportInvalid, match="tool_args is not JSON"):
        restore_bytes(service, forge([lines[0], *(orjson.dumps(record) for record in records)]))
    assert nothing_restored(service, "copy")


def test_a_broken_generation_chain_is_refused(service: Obsmem) -> None:
    """An active pointer whose number does not match its chain of parents is refused, not restored."""
    small_project(service)
    lines = exported(service).splitlines()
    header = orjson.loads(lines[0])
    columns = {entry["kind"]: entry["columns"] for entry in header["tables"]}
    generation = dict.fromkeys(columns["generation"]) | {
        "id": 1,
        "generation_id": "a" * 64,
        "session_id": "s1",
        "state": "promoted",
        "number": 1,
        "claims": 1,
        "observations_before": 0,
        "observation_tokens_before": 0,
        "reflections_added": 0,
        "observations_dropped": 0,
        "created_at": "2026-03-01T10:00:00Z",
    }
    pointer = {"session_id": "s1", "generation_row": 1, "number": 2, "promoted_at": "2026-03-01T10:00:00Z"}
    records = [
        orjson.dumps({"kind": "generation", "row": generation}),
        orjson.dumps({"kind": "active_generation", "row": pointer}),
    ]
    before = [line for line in lines[1:-1] if KINDS_ORDER[orjson.loads(line)["kind"]] < KINDS_ORDER["generation"]]
    with pytest.raises(ExportInvalid, match="chain of parent generations"):
        restore_bytes(service, forge([lines[0], *before, *records]))
    assert nothing_restored(service, "copy")


KINDS_ORDER = {kind.name: position for position, kind in enumerate(KINDS)}


def test_a_project_with_data_is_refused_and_kept_as_it_was(service: Obsmem) -> None:
    small_project(service)
    small_project(service, "busy")
    before = canonical_rows(service, "busy")
    data = exported(service)
    with pytest.raises(ProjectNotEmpty, match="'busy' already holds data"):
        restore_bytes(service, data, "busy")
    assert canonical_rows(service, "busy") == before


def test_an_existing_empty_project_can_be_restored_into(service: Obsmem) -> None:
    small_project(service)
    service.database("empty", create=True)
    receipt = restore_bytes(service, exported(service), "empty")
    assert receipt.exported_project == "src" and receipt.counts["event"] == 4
    assert canonical_rows(service, "empty") == canonical_rows(service, "src")


def test_an_export_refuses_a_table_no_rule_covers_before_writing(service: Obsmem, tmp_path: Path) -> None:
    small_project(service)
    with service.database("src").write() as conn:
        conn.execute("CREATE TABLE scratchpad (id INTEGER PRIMARY KEY, text TEXT)")
    out = tmp_path / "out.export"
    with out.open("wb") as handle, pytest.raises(ExportIncomplete, match="scratchpad"):
        export_project(service, "src", handle)
    assert out.read_bytes() == b""


def test_restored_memories_are_found_by_exact_search(service: Obsmem) -> None:
    small_project(service)
    restore_bytes(service, exported(service))
    assert [h.id for h in service.search("copy", "Fridays").hits] == [
        h.id for h in service.search("src", "Fridays").hits
    ]
    assert service.search("copy", "Fridays").hits


# -- random small projects -----------------------------------------------------------------------------------

_text = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=30).filter(str.strip)
_event = st.one_of(
    st.builds(
        lambda role, text: {"role": role, "content": text}, st.sampled_from(["user", "assistant", "system"]), _text
    ),
    st.builds(
        lambda name, arg: {"role": "assistant", "type": "tool_call", "tool_name": name, "tool_args": {"arg": arg}},
        st.sampled_from(["bash", "read_file"]),
        _text,
    ),
    st.builds(lambda text: {"role": "tool", "type": "tool_result", "content": text}, _text),
)
_sessions = st.dictionaries(st.sampled_from(["a", "b", "c"]), st.lists(_event, min_size=1, max_size=6), min_size=1)
_project_numbers = itertools.count()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sessions=_sessions, notes=st.lists(st.tuples(_text, st.integers(0, 20), st.booleans()), max_size=6))
def test_random_small_projects_round_trip(
    service: Obsmem, sessions: dict[str, list[dict[str, Any]]], notes: list[tuple[str, int, bool]]
) -> None:
    number = next(_project_numbers)
    source, copy = f"rand-{number}", f"rand-{number}-copy"
    for session_id, events in sessions.items():
        service.append_events(source, session_id, events)
    session_ids = sorted(sessions)
    items = [
        {
            "session_id": session_ids[pick % len(session_ids)],
            "content": text,
            "timestamp": f"2026-04-{1 + pick % 28:02d} 12:{pick:02d}",
            "source_refs": [1 + pick % len(sessions[session_ids[pick % len(session_ids)]])],
        }
        for text, pick, _ in notes
    ]
    written = service.add_observations(source, items)
    for entry, (_, _, forget) in zip(written.added, notes, strict=False):
        if forget:
            service.forget(source, entry.memory_id)
    path = service.settings.data_dir / f"{source}.export"
    with path.open("wb") as out:
        export_project(service, source, out)
    restore_project(service, path, copy)
    assert canonical_rows(service, copy) == canonical_rows(service, source)
    for text, _, _ in notes:
        needle = text.strip()[:3]
        original = service.search(source, needle, limit=50).to_dict()
        assert service.search(copy, needle, limit=50).to_dict() == original


_NOTE_TEXTS = ("deploy on fridays", "keep the runbook short", "rotate the keys monthly")
_trust_steps = st.lists(
    st.one_of(
        st.tuples(st.just("save"), st.integers(0, 2), st.none()),
        st.tuples(st.just("update"), st.integers(0, 9), st.integers(0, 2)),
        st.tuples(st.just("forget"), st.integers(0, 9), st.none()),
        st.tuples(st.just("judge"), st.integers(0, 9), st.one_of(st.none(), st.floats(0, 1))),
        st.tuples(st.just("resolve"), st.integers(0, 9), st.booleans()),
        st.tuples(st.just("groom"), st.none(), st.none()),
        st.tuples(st.just("approve"), st.integers(0, 9), st.none()),  # judged, resolved true, groomed
    ),
    max_size=20,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_trust_steps)
def test_random_trust_histories_round_trip(service: Obsmem, steps: list[tuple[str, Any, Any]]) -> None:
    """Whatever saves, updates, forgets, judgments (of a note in any state, as a judge job racing a forget or
    a promotion records them), resolutions and groom passes made, the restore's replay of the trust ledger
    accepts the export, and the copy holds the same notes, judgments and ledger."""
    number = next(_project_numbers)
    source, copy = f"trust-{number}", f"trust-{number}-copy"
    service.append_events(source, "s1", [{"role": "user", "content": "hello"}])
    notes: list[str] = []
    judgments: list[str] = []
    for step, pick, value in steps:
        try:
            if step == "save":
                notes.append(service.save_note(source, _NOTE_TEXTS[pick]).note.note_id)
            elif step == "update" and notes:
                notes.append(service.update_note(source, notes[pick % len(notes)], _NOTE_TEXTS[value]).note.note_id)
            elif step == "forget" and notes:
                service.forget_note(source, notes[pick % len(notes)])
            elif step == "approve" and notes:
                judgment_id = f"j{len(judgments):016x}"
                with service.database(source).write() as conn:
                    record_judged(
                        conn, judgment_id, notes[pick % len(notes)], "deploy", "human", None, "escalate", None
                    )
                judgments.append(judgment_id)
                service.resolve_judgment(source, judgment_id, True)
                service.groom(source)
            elif step == "judge" and notes:
                judgment_id = f"j{len(judgments):016x}"
                decision = "escalate" if value is None else "inject" if value >= 0.7 else "hold"
                error = "judge_timeout: no answer in time" if value is None and pick % 2 else None
                with service.database(source).write() as conn:
                    note_id = notes[pick % len(notes)]
                    record_judged(conn, judgment_id, note_id, "deploy", "http", value, decision, error)
                judgments.append(judgment_id)
            elif step == "resolve" and judgments:
                service.resolve_judgment(source, judgments[pick % len(judgments)], value)
            elif step == "groom":
                service.groom(source)
        except ObsmemError as refused:
            assert refused.code in ("note_forgotten", "note_superseded", "judgment_resolved")
    path = service.settings.data_dir / f"{source}.export"
    with path.open("wb") as out:
        export_project(service, source, out)
    restore_project(service, path, copy)
    assert canonical_rows(service, copy) == canonical_rows(service, source)


# -- the commands --------------------------------------------------------------------------------------------


def run(data_dir: Path, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--data-dir", str(data_dir), *args], catch_exceptions=False)


def test_export_and_restore_commands_round_trip(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with Obsmem(data_dir=data_dir) as service:
        small_project(service)
    output = tmp_path / "exports" / "src.jsonl"
    output.parent.mkdir()
    result = run(data_dir, "export", "src", "--output", str(output), "--no-progress")
    assert result.exit_code == 0, result.output
    assert f"to {output}" in result.output and not list(output.parent.glob(".*partial"))
    to_stdout = run(data_dir, "export", "src")
    assert to_stdout.exit_code == 0
    assert without_the_clock(to_stdout.stdout_bytes) == without_the_clock(output.read_bytes())
    restored = run(data_dir, "restore", str(output), "--project", "copy", "--json")
    assert restored.exit_code == 0, restored.output
    receipt = json.loads(restored.output)
    assert receipt["project"] == "copy" and receipt["exported_project"] == "src" and receipt["counts"]["event"] == 4
    with Obsmem(data_dir=data_dir) as service:
        assert canonical_rows(service, "copy") == canonical_rows(service, "src")
    again = run(data_dir, "restore", str(output), "--project", "copy")
    assert again.exit_code == 1 and "error: project_not_empty:" in again.output
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(output.read_bytes()[:-40])
    truncated = run(data_dir, "restore", str(cut), "--project", "other")
    assert truncated.exit_code == 2 and "error: export_truncated:" in truncated.output
    missing = run(data_dir, "export", "nope")
    assert missing.exit_code == 1 and "error: project_not_found:" in missing.output


def test_export_json_prints_the_receipt_of_an_export_to_a_file(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with Obsmem(data_dir=data_dir) as service:
        small_project(service)
    output = tmp_path / "src.jsonl"
    result = run(data_dir, "export", "src", "--output", str(output), "--json")
    assert result.exit_code == 0, result.output
    receipt = json.loads(result.stdout)
    trailer = orjson.loads(output.read_bytes().splitlines()[-1])
    assert receipt["project"] == "src" and receipt["output"] == str(output)
    assert (receipt["counts"], receipt["records"], receipt["sha256"]) == (
        trailer["counts"],
        trailer["records"],
        trailer["sha256"],
    )
    to_stdout = run(data_dir, "export", "src", "--json")
    assert to_stdout.exit_code == 2 and "--output" in to_stdout.stderr and to_stdout.stdout == ""


def test_a_failed_export_leaves_no_file_under_the_name_asked_for(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with Obsmem(data_dir=data_dir) as service:
        small_project(service)
        with service.database("src").write() as conn:
            conn.execute("CREATE TABLE scratchpad (id INTEGER PRIMARY KEY)")
    output = tmp_path / "src.jsonl"
    result = run(data_dir, "export", "src", "--output", str(output))
    assert result.exit_code == 1 and "error: export_unknown_table:" in result.output
    assert list(tmp_path.iterdir()) == [data_dir]


def test_an_export_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with Obsmem(data_dir=data_dir) as service:
        small_project(service)
    output = tmp_path / "src.jsonl"
    assert run(data_dir, "export", "src", "--output", str(output)).exit_code == 0
    assert output.stat().st_mode & 0o777 == 0o600


def test_generations_in_every_state_are_restored_through_the_schema_rules(service: Obsmem) -> None:
    """A ledger with a promoted chain of two, an unchanged and a superseded sibling and a run still going:
    restored as it was, with the active pointer at the chain's end and the projection unchanged."""
    small_project(service)
    now = "2026-03-01T11:00:00Z"
    with service.database("src").write() as conn:
        (observation,) = conn.execute("SELECT memory_id FROM memories WHERE id = 1").fetchone()
        written, _ = add_reflection(
            conn, ReflectionIn("s1", "Passwords rotate weekly", (observation,), "2026-03-01 10:00")
        )
        (reflection,) = conn.execute("SELECT id FROM memories WHERE memory_id = ?", (written,)).fetchone()

        def generation(letter: str, parent: int | None) -> int:
            sql = "INSERT INTO generations(generation_id, session_id, parent, created_at) VALUES (?, 's1', ?, ?)"
            return int(conn.execute(sql + " RETURNING id", (letter * 64, parent, now)).fetchone()[0])

        def finish(row: int, state: str, number: int | None = None) -> None:
            conn.execute(
                "UPDATE generations SET state = ?, number = ?, finished_at = ? WHERE id = ?", (state, number, now, row)
            )

        first = generation("1", None)
        conn.execute("INSERT INTO generation_reflections VALUES (?, ?)", (first, reflection))
        conn.execute("INSERT INTO dropped_observations VALUES (1, 's1', ?, 0, 1, ?)", (first, now))
        finish(first, "promoted", 1)
        conn.execute("INSERT INTO active_generation VALUES ('s1', ?, 1, ?)", (first, now))
        finish(generation("2", first), "unchanged")
        second = generation("3", first)
        finish(second, "promoted", 2)
        conn.execute("UPDATE active_generation SET generation_row = ?, number = 2 WHERE session_id = 's1'", (second,))
        finish(generation("4", first), "superseded")
        generation("5", second)  # still running
    restore_bytes(service, exported(service))
    assert canonical_rows(service, "copy") == canonical_rows(service, "src")
    states = service.database("copy").query("SELECT state FROM generations ORDER BY id")
    assert [state for (state,) in states] == ["promoted", "unchanged", "promoted", "superseded", "running"]
    assert service.memory("copy", "s1").to_dict() == service.memory("src", "s1").to_dict()
    assert service.memory("copy", "s1").generation == 2


def test_notes_judgments_and_the_trust_ledger_travel(service: Obsmem) -> None:
    """Notes in every state, their judgments (open and resolved) and the append-only ledger: identical rows
    in the copy, and the copy's notes are found by search as in the original."""
    small_project(service)
    kept = service.save_note("src", "keep the runbook short", situation="writing operations docs")
    replaced = service.save_note("src", "deploys go out on Tuesdays")
    service.update_note("src", replaced.note.id, "deploys go out on Thursdays")
    forgotten = service.save_note("src", "the staging password rotates weekly")
    service.forget_note("src", forgotten.note.id)
    with service.database("src").write() as conn:
        record_judged(conn, "j" + "1" * 16, kept.note.note_id, "runbook length", "human", None, "escalate", None)
        record_judged(conn, "j" + "2" * 16, replaced.note.note_id, "deploy day", "http", 0.9, "inject", None)
    service.resolve_judgment("src", "j" + "1" * 16, True)
    restore_bytes(service, exported(service))
    for table in ("notes", "judgments", "trust_ledger"):
        order = "judgment_id" if table == "judgments" else "id"
        query = f"SELECT * FROM {table} ORDER BY {order}"
        assert service.database("copy").query(query) == service.database("src").query(query), table
    assert len(service.database("copy").query("SELECT 1 FROM trust_ledger")) >= 4
    found = service.search("copy", "runbook", mode="exact", trust="all").to_dict()
    assert found == service.search("src", "runbook", mode="exact", trust="all").to_dict()
    assert any(hit["kind"] == "note" for hit in found["hits"])


def test_progress_is_reported_for_every_phase(service: Obsmem, tmp_path: Path) -> None:
    service.append_events("big", "s1", [{"role": "user", "content": f"message {i}"} for i in range(2500)])
    reports: list[tuple[str, int, int]] = []
    path = tmp_path / "big.export"
    with path.open("wb") as out:
        receipt = export_project(service, "big", out, progress=lambda *report: reports.append(report))
    restore_project(service, path, "big-copy", progress=lambda *report: reports.append(report))
    phases = {phase: [(done, total) for p, done, total in reports if p == phase] for phase in ("export", "verify")}
    assert phases["export"][-1] == (receipt.records, receipt.records) and len(phases["export"]) >= 3
    assert [done for done, _ in phases["verify"]] == [1000, 2000]
    restoring = [(done, total) for phase, done, total in reports if phase == "restore"]
    assert restoring[-1] == (receipt.records, receipt.records) and len(restoring) >= 3


def test_an_export_refuses_a_database_lacking_a_table_the_rules_name(service: Obsmem, tmp_path: Path) -> None:
    small_project(service)
    with service.database("src").write() as conn:
        conn.execute("DROP TABLE model_overrides")
    with (tmp_path / "out.export").open("wb") as out, pytest.raises(ExportIncomplete, match="lacks .*model_overrides"):
        export_project(service, "src", out)


def test_a_restore_killed_before_its_commit_leaves_the_project_empty_and_restorable(tmp_path: Path) -> None:
    """``kill -9`` after every row is written but before the commit: the project is empty (SQLite rolls
    the transaction back at the next open), and the same restore then succeeds."""
    data_dir = tmp_path / "data"
    with Obsmem(data_dir=data_dir) as service:
        small_project(service)
        data = exported(service)
    path = tmp_path / "src.export"
    path.write_bytes(data)
    command = [sys.executable, "-m", "obsmem.surfaces.cli", "--data-dir", str(data_dir), "restore", str(path)]
    environment = {**os.environ, "OBSMEM_CRASH_AT": "restore:written", "PYTHONSAFEPATH": "1"}
    killed = subprocess.run(
        [*command, "--project", "copy"], env=environment, capture_output=True, timeout=120, stdin=subprocess.DEVNULL
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with Obsmem(data_dir=data_dir) as service:
        assert nothing_restored(service, "copy")
        restore_project(service, path, "copy")
        assert canonical_rows(service, "copy") == canonical_rows(service, "src")


def test_import_watermarks_travel_so_the_copy_imports_nothing_twice(service: Obsmem, tmp_path: Path) -> None:
    transcripts = sorted((copy_fixture("claude-code", tmp_path) / "projects").rglob("*.jsonl"))
    first = service.import_transcripts("claude-code", transcripts, project="src")
    assert first.added > 0 and first.problems == 0
    restore_bytes(service, exported(service))
    for table in ("import_files", "import_records"):
        query = f"SELECT * FROM {table} ORDER BY 1, 2"
        assert service.database("copy").query(query) == service.database("src").query(query), table
    again = service.import_transcripts("claude-code", transcripts, project="copy")
    assert again.added == 0 and again.duplicates == 0, "the copy knows how far each file was imported"
    events = "SELECT session_id, seq, content FROM events ORDER BY session_id, seq"
    assert service.database("copy").query(events) == service.database("src").query(events)
