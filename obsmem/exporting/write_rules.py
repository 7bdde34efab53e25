"""A restore is a write: every row of an export must be one obsmem's own writes could have made.

The reader proves the file whole and the schema checks its constraints, but neither knows what a write
checks before it stores a row. So each row is checked with the write paths' own rules (its values' types
first, by :func:`obsmem.exporting.rows.require_value_types`):

- text is what its write takes: one line where a memory or a note is one line, within the write's length
  limit (an event's and an observation's limit is checked before redaction, whose marker may be longer
  than the secret, and a restore redacts any text an older obsmem stored as given, so the shortest text
  redaction could have made this from is what is measured), and a
  session id of the session id's form (not its secret check, which came after sessions were written: a
  session id of an older export that looks like a secret today was a valid one then);
- a memory's id is the one its write derives (:mod:`obsmem.ids`) from its session, minute, content and
  sources (an observation) or supporting observations (a reflection), and a note's the one
  :func:`obsmem.notes.note_identity` derives: ids make writes idempotent, so an id that is not its
  content's would make a later write of that content a silent duplicate of something else;
- notes, judgments and the trust ledger agree as the trust floor's writes leave them, and a note marked
  trusted was promoted, as the ledger shows (:mod:`obsmem.exporting.trust_rules`).

Each row is checked as the file holds it, not as the restore stores it: an export of an obsmem that
lacked one of today's secret detectors holds text the restore redacts (redacting.py), under the id its
write made from that text, and the restored row keeps that id, which other rows cite. An export of that
copy then holds the redacted text under the id of text nothing holds any more: so a memory or note whose
text holds a redaction marker is not held to the id its text makes (the text it was made from is gone).

An observation's sources, a reflection's supports and a note's ledger entries are records of later kinds,
so those rules are checked once the kind that completes them is in (:func:`check_observation_ids`,
:func:`check_reflection_ids`, :func:`obsmem.exporting.trust_rules.check_trust`). Messages name the line and
the rule, never a value.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable
from typing import Any

from obsmem import ids
from obsmem.bounds import is_strict_int
from obsmem.dates import parse_timestamp
from obsmem.errors import ExportInvalid, ObsmemError
from obsmem.events import MAX_EVENT_CONTENT, MAX_TOOL_FIELD
from obsmem.exporting import trust_rules
from obsmem.exporting.rows import RestoreState
from obsmem.memories import MAX_MEMORY_CHARS, memory_content
from obsmem.notes import MAX_NOTE_CHARS, MAX_SITUATION_CHARS, note_identity, note_text
from obsmem.redaction import holds_marker, shortest_original_length
from obsmem.validation import SESSION_ID

_SECONDS = re.compile(r":[0-5][0-9]")
# A memory's and a note's id: the SHA-256, in lowercase hex, of what defines it (obsmem.ids).
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")

# What state.pending holds between a row and the step that checks it once its kind's records are all in.
_OBSERVATIONS = "write_rules.observations"  # memory row -> (line, memory_id, session_id, minute, content)
_SOURCES = "write_rules.sources"  # memory row -> [(session_id, seq)]
_OBSERVATION_IDS = "write_rules.observation_ids"  # memory row -> memory_id, for the reflections' supports
_REFLECTIONS = "write_rules.reflections"  # memory row -> (line, memory_id, session_id, minute, content)
_SUPPORTS = "write_rules.supports"  # reflection row -> [(line, observation row)]


def check_row(state: RestoreState, kind: str, row: dict[str, Any]) -> None:
    """Check one row as the file holds it (values already of their columns' types)."""
    rule = _ROW_RULES.get(kind)
    if rule is not None:
        rule(state, row)


def _session(state: RestoreState, row: dict[str, Any]) -> None:
    session_id = row.get("session_id")
    if not isinstance(session_id, str) or SESSION_ID.fullmatch(session_id) is None:
        raise ExportInvalid(f"line {state.line}: a session's session_id is not of the form a session id takes")


def _event(state: RestoreState, row: dict[str, Any]) -> None:
    for column, limit in (
        ("content", MAX_EVENT_CONTENT),
        ("tool_name", MAX_TOOL_FIELD),
        ("tool_call_id", MAX_TOOL_FIELD),
    ):
        _within(state, "event", column, row.get(column), limit)


def _memory_text(state: RestoreState, kind: str, content: object) -> None:
    """A memory's content as :func:`obsmem.memories.memory_content` takes it, within its limit."""
    if not isinstance(content, str):
        raise ExportInvalid(f"line {state.line}: {_a(kind)}'s content is not text")
    try:
        memory_content(content)
    except ValueError as exc:
        raise ExportInvalid(f"line {state.line}: {_a(kind)}'s content {exc}") from None
    _within(state, kind, "content", content, MAX_MEMORY_CHARS)


def _within(state: RestoreState, kind: str, column: str, text: object, limit: int) -> None:
    """Within ``limit`` as the shortest text redaction could have made it from: an event's and an
    observation's write limits the text before redacting it, and a restore redacts the text of every kind
    an older obsmem stored as given (a marker may be longer than the secret it stands for)."""
    if isinstance(text, str) and shortest_original_length(text) > limit:
        raise ExportInvalid(f"line {state.line}: {_a(kind)}'s {column} is longer than {limit} characters")


def _observation(state: RestoreState, row: dict[str, Any]) -> None:
    _pending_memory(state, "observation", _OBSERVATIONS, row, seconds=False)


def _observation_source(state: RestoreState, row: dict[str, Any]) -> None:
    refs = state.pending.setdefault(_SOURCES, {}).setdefault(row.get("memory_row"), [])
    refs.append((row.get("session_id"), row.get("seq")))


def _reflection(state: RestoreState, row: dict[str, Any]) -> None:
    _pending_memory(state, "reflection", _REFLECTIONS, row, seconds=True)


def _pending_memory(state: RestoreState, kind: str, pending_key: str, row: dict[str, Any], *, seconds: bool) -> None:
    """An observation's or reflection's own checks, and what its id check needs once the rows it cites
    (sources or supports, later in the file) are in."""
    _memory_text(state, kind, row.get("content"))
    _require_row_id(state, kind, row)
    _require_id_form(state, kind, "memory_id", row.get("memory_id"))
    minute = _minute(state, kind, row.get("date"), seconds=seconds)
    pending = state.pending.setdefault(pending_key, {})
    pending[row.get("id")] = (state.line, row.get("memory_id"), row.get("session_id"), minute, row.get("content"))


def _reflection_support(state: RestoreState, row: dict[str, Any]) -> None:
    supports = state.pending.setdefault(_SUPPORTS, {}).setdefault(row.get("reflection_row"), [])
    supports.append((state.line, row.get("observation_row")))


def _note(state: RestoreState, row: dict[str, Any]) -> None:
    for column, limit, required in (("content", MAX_NOTE_CHARS, True), ("situation", MAX_SITUATION_CHARS, False)):
        try:
            note_text(row.get(column), column, required=required)
        except ObsmemError as exc:
            raise ExportInvalid(f"line {state.line}: a note's {exc.message}") from None
        _within(state, "note", column, row.get(column), limit)
    trust_rules.note_row(state, row)
    _require_id_form(state, "note", "note_id", row.get("note_id"))
    # A file from before a column existed lacks it, and the row takes the column's default ('' for situation).
    tier, content, situation = (str(row.get(name, "")) for name in ("tier", "content", "situation"))
    made = note_identity(tier, content, situation, row.get("supersedes"))
    if row.get("note_id") != made and not (holds_marker(content) or holds_marker(situation)):
        raise ExportInvalid(
            f"line {state.line}: a note's note_id is not the id its tier, content, situation and the note it "
            "supersedes make (no write stores such a row)"
        )


def _require_row_id(state: RestoreState, kind: str, row: dict[str, Any]) -> None:
    """Every export carries a memory's row id (sources and supports cite it); without it the rows the
    sources and supports belong to, and so the ids they make, could not be known."""
    row_id = row.get("id")
    if not is_strict_int(row_id):
        raise ExportInvalid(f"line {state.line}: {_a(kind)} without its row id")
    if row_id < 1:
        raise ExportInvalid(f"line {state.line}: {_a(kind)}'s row id is below 1 (rows are numbered from 1)")


def _require_id_form(state: RestoreState, kind: str, column: str, value: object) -> None:
    """Every id a write derives is a SHA-256 in hex, whether or not its text can still be checked against it:
    one whose text holds a redaction marker is not held to its text, but still to its form (ids are shown and
    logged, and text put there is shown and logged with them)."""
    if not isinstance(value, str) or _SHA256_HEX.fullmatch(value) is None:
        raise ExportInvalid(
            f"line {state.line}: {_a(kind)}'s {column} is not of the form its write derives (a SHA-256)"
        )


def _minute(state: RestoreState, kind: str, stored: object, *, seconds: bool) -> str:
    """The ``YYYY-MM-DD HH:MM`` a memory's id is made from: its stored date, which an observation's write
    stores to the minute (``:00``) and a reflection's to the second."""
    if isinstance(stored, str):
        try:
            minute = parse_timestamp(stored[:16])
        except ObsmemError:
            pass
        else:
            tail = stored[16:]
            if (_SECONDS.fullmatch(tail) is not None) if seconds else tail == ":00":
                return minute
    raise ExportInvalid(f"line {state.line}: {_a(kind)}'s date is not a date its write stores")


def check_observation_ids(state: RestoreState) -> None:
    """Once every observation_source record is in: each observation's id is the one its write made."""
    observations = state.pending.pop(_OBSERVATIONS, {})
    sources = state.pending.pop(_SOURCES, {})
    for row, (line, memory_id, session_id, minute, content) in observations.items():
        made = ids.observation_id(session_id, minute, content, sources.get(row, []))
        if memory_id != made and not holds_marker(content):  # a marker: perhaps redacted after its id was made
            raise ExportInvalid(
                f"line {line}: an observation's memory_id is not the id its session, timestamp, content and "
                "source events make (no write stores such a row)"
            )
    state.pending[_OBSERVATION_IDS] = {row: entry[1] for row, entry in observations.items()}


def check_reflection_ids(state: RestoreState) -> None:
    """Once every reflection_support record is in: each reflection's id is the one its write made.

    Forgetting an observation deletes its support rows with it (the schema cascades) and keeps the
    reflections it supported, whose ids were made from every support: an honest export may hold a
    reflection whose remaining supports no longer make its id. Such a reflection is accepted when some memory
    row below its own is missing from the file (its supports were written before it, so a forgotten one
    leaves that gap; the rows keep their ids); without a gap nothing can have been forgotten, and it is
    refused. So a support's row must be below its reflection's, as every reflection's write leaves it.

    Gaps themselves are legal: a forget deletes a row, and PostgreSQL's identity skips the ids of writes that
    rolled back. Nothing reads memory rows as contiguous (they are keys and an order); this rule is the only
    reader of a gap, and a gap left by hand is not told from a forget's."""
    observation_ids = state.pending.pop(_OBSERVATION_IDS, {})
    reflections = state.pending.pop(_REFLECTIONS, {})
    supports = state.pending.pop(_SUPPORTS, {})
    for row, cited in supports.items():
        for line, observation in cited:
            if observation not in observation_ids or row not in reflections:  # each only a memory's row
                raise ExportInvalid(
                    f"line {line}: a reflection_support does not link a reflection of the file to an observation "
                    "of the file (a reflection's write links it to observations only)"
                )
            if not observation < row:  # both a memory's row, so integers
                raise ExportInvalid(
                    f"line {line}: a reflection_support links a reflection to an observation stored after it (a "
                    "reflection's write cites observations already stored, whose rows are below its own)"
                )
    rows = sorted(row for row in (*observation_ids, *reflections) if isinstance(row, int))
    for row, (line, memory_id, session_id, minute, content) in reflections.items():
        supporting = [observation_ids[observation] for _, observation in supports.get(row, [])]
        if memory_id == ids.reflection_id(session_id, minute, content, supporting):
            continue
        if holds_marker(content):
            continue  # perhaps redacted by a restore after its id was made (see the module docstring)
        if isinstance(row, int) and bisect_left(rows, row) < row - 1:
            continue  # a memory below it was forgotten: maybe one of its supports
        raise ExportInvalid(
            f"line {line}: a reflection's memory_id is not the id its session, timestamp, content and "
            "supporting observations make (no write stores such a row)"
        )


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


_ROW_RULES: dict[str, Callable[[RestoreState, dict[str, Any]], None]] = {
    "session": _session,
    "event": _event,
    "observation": _observation,
    "observation_source": _observation_source,
    "reflection": _reflection,
    "reflection_support": _reflection_support,
    "note": _note,
    "pipeline_event": trust_rules.pipeline_event_row,
    "judgment": trust_rules.judgment_row,
    "trust_entry": trust_rules.entry_row,
}
