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
:func:`check_reflection_ids`, :func:`obsmem.exporting.trust_rules.check_trust`). Until then a memory leaves
its row and file line only: the rest is read back from the restore's own transaction a page at a time, so
a restore's memory does not grow with the text of the file. Messages name the line and the rule, never a
value.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import apsw

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
_OBSERVATIONS = "write_rules.observations"  # _Memories
_OBSERVATION_ROWS = "write_rules.observation_rows"  # the observations' rows, sorted, for the reflections' checks
_REFLECTIONS = "write_rules.reflections"  # _Memories
_SUPPORTS = "write_rules.supports"  # _Supports
# Memories read back from the database at a time when their ids are checked.
_PAGE = 500  # at most 2 MB of text at a time (4,000 characters a memory)


@dataclass
class _Memories:
    """The memories of one kind the restore wrote, kept small until their ids can be checked: each one's row
    and file line (16 bytes; its id, session, date and text are read back from the database then), and the
    text as the file held it of the few whose text the restore's redaction changed."""

    rows: array[int] = field(default_factory=lambda: array("q"))
    lines: array[int] = field(default_factory=lambda: array("q"))
    redacted: dict[int, str] = field(default_factory=dict)  # row -> its text as the file held it

    def line_of(self, row: int) -> int:
        return self.lines[self.rows.index(row)]


@dataclass
class _Supports:
    """Every reflection_support record: its reflection's row, its observation's row and its file line."""

    reflections: array[int] = field(default_factory=lambda: array("q"))
    observations: array[int] = field(default_factory=lambda: array("q"))
    lines: array[int] = field(default_factory=lambda: array("q"))


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


def _reflection(state: RestoreState, row: dict[str, Any]) -> None:
    _pending_memory(state, "reflection", _REFLECTIONS, row, seconds=True)


def _pending_memory(state: RestoreState, kind: str, pending_key: str, row: dict[str, Any], *, seconds: bool) -> None:
    """An observation's or reflection's own checks, and what its id check needs once the rows it cites
    (sources or supports, later in the file) are in."""
    _memory_text(state, kind, row.get("content"))
    _require_row_id(state, kind, row)
    _require_id_form(state, kind, "memory_id", row.get("memory_id"))
    _minute(state, kind, row.get("date"), seconds=seconds)
    pending: _Memories = state.pending.setdefault(pending_key, _Memories())
    pending.rows.append(row["id"])
    pending.lines.append(state.line)


def keep_redacted_text(state: RestoreState, kind: str, row: dict[str, Any]) -> None:
    """The restore's redaction changed the text of ``row`` (as the file holds it): an observation's or a
    reflection's id is checked against that text, which the database will not hold."""
    pending_key = {"observation": _OBSERVATIONS, "reflection": _REFLECTIONS}.get(kind)
    if pending_key is not None:
        state.pending[pending_key].redacted[row["id"]] = row["content"]


def _reflection_support(state: RestoreState, row: dict[str, Any]) -> None:
    if not (is_strict_int(row.get("reflection_row")) and is_strict_int(row.get("observation_row"))):
        raise ExportInvalid(f"line {state.line}: a reflection_support without the rows it links")
    supports: _Supports = state.pending.setdefault(_SUPPORTS, _Supports())
    supports.reflections.append(row["reflection_row"])
    supports.observations.append(row["observation_row"])
    supports.lines.append(state.line)


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
    if cast(int, row_id) < 1:
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
    observations: _Memories = state.pending.pop(_OBSERVATIONS, _Memories())
    sources = "SELECT memory_row, session_id, seq FROM observation_sources WHERE memory_row BETWEEN ? AND ?"
    for row, memory_id, session_id, date, content, refs in _written(state.conn, "observation", sources):
        content = observations.redacted.get(row, content)
        made = ids.observation_id(session_id, _stored_minute(date), content, refs)
        if memory_id != made and not holds_marker(content):  # a marker: perhaps redacted after its id was made
            raise ExportInvalid(
                f"line {observations.line_of(row)}: an observation's memory_id is not the id its session, "
                "timestamp, content and source events make (no write stores such a row)"
            )
    state.pending[_OBSERVATION_ROWS] = array("q", sorted(observations.rows))


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
    observations: array[int] = state.pending.pop(_OBSERVATION_ROWS, array("q"))
    reflections: _Memories = state.pending.pop(_REFLECTIONS, _Memories())
    supports: _Supports = state.pending.pop(_SUPPORTS, _Supports())
    reflection_rows = array("q", sorted(reflections.rows))
    for row, observation, line in zip(supports.reflections, supports.observations, supports.lines, strict=True):
        if not (_holds(observations, observation) and _holds(reflection_rows, row)):  # each only a memory's row
            raise ExportInvalid(
                f"line {line}: a reflection_support does not link a reflection of the file to an observation "
                "of the file (a reflection's write links it to observations only)"
            )
        if not observation < row:
            raise ExportInvalid(
                f"line {line}: a reflection_support links a reflection to an observation stored after it (a "
                "reflection's write cites observations already stored, whose rows are below its own)"
            )
    del supports
    rows = array("q", sorted((*observations, *reflection_rows)))
    cited = (
        "SELECT s.reflection_row, o.memory_id FROM reflection_supports AS s JOIN memories AS o"
        " ON o.id = s.observation_row WHERE s.reflection_row BETWEEN ? AND ?"
    )
    for row, memory_id, session_id, date, content, supporting in _written(state.conn, "reflection", cited):
        content = reflections.redacted.get(row, content)
        made = ids.reflection_id(session_id, _stored_minute(date), content, [found for (found,) in supporting])
        if memory_id == made:
            continue
        if holds_marker(content):
            continue  # perhaps redacted by a restore after its id was made (see the module docstring)
        if bisect_left(rows, row) < row - 1:
            continue  # a memory below it was forgotten: maybe one of its supports
        raise ExportInvalid(
            f"line {reflections.line_of(row)}: a reflection's memory_id is not the id its session, timestamp, "
            "content and supporting observations make (no write stores such a row)"
        )


def _written(conn: apsw.Connection, kind: str, cited_sql: str) -> Iterator[tuple[Any, ...]]:
    """Every memory of ``kind`` the restore wrote, in row order and read a page at a time: its row, id,
    session, date and text, and the rows ``cited_sql`` gives for it (its sources or supports: the query
    takes a page's first and last row and answers the citing row first)."""
    after: Any = 0
    while True:
        page = conn.execute(
            "SELECT id, memory_id, session_id, date, content FROM memories WHERE kind = ? AND id > ?"
            " ORDER BY id LIMIT ?",
            (kind, after, _PAGE),
        ).fetchall()
        if not page:
            return
        cited: dict[Any, list[tuple[Any, ...]]] = {}
        for owner, *values in conn.execute(cited_sql, (page[0][0], page[-1][0])).fetchall():
            cited.setdefault(owner, []).append(tuple(values))
        for found in page:
            yield (*found, cited.get(found[0], []))
        after = page[-1][0]


def _stored_minute(date: str) -> str:
    """The minute a memory's id is made from, of a date :func:`_minute` accepted as the file held it."""
    return parse_timestamp(date[:16])


def _holds(rows: array[int], row: int) -> bool:
    """Whether the sorted ``rows`` hold ``row``."""
    at = bisect_left(rows, row)
    return at < len(rows) and rows[at] == row


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


_ROW_RULES: dict[str, Callable[[RestoreState, dict[str, Any]], None]] = {
    "session": _session,
    "event": _event,
    "observation": _observation,
    "reflection": _reflection,
    "reflection_support": _reflection_support,
    "note": _note,
    "pipeline_event": trust_rules.pipeline_event_row,
    "judgment": trust_rules.judgment_row,
    "trust_entry": trust_rules.entry_row,
}
