"""Conversation events: validation and idempotent, atomic appends.

An event is addressed by ``(session_id, seq)``. Appending the identical event at a used ``seq`` again is a
duplicate (so sending an append again is safe when its events carry their seqs); a *different* event at a
used ``seq`` is a conflict, and the whole batch is refused so nothing partial is stored. Events without a
``seq`` are numbered after the last one when stored: sent again, they are stored again.

Secrets are redacted (:mod:`obsmem.redaction`) from every text field before an event is fingerprinted or
stored, so a key pasted into a conversation (or a tool name, arguments or result) never reaches the
database. An ``after_insert`` hook runs inside the append's own transaction with the rows just stored; the
Observer trigger uses it to count unobserved tokens and queue a job atomically with the append (it never
calls a model).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple, cast

import apsw
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from obsmem.bounds import MAX_SEQ
from obsmem.dates import now_iso
from obsmem.errors import NotFound, SeqConflict, ValidationFailed
from obsmem.ids import canonical_json
from obsmem.json_shape import json_shape_problem
from obsmem.redaction import redact_json, redact_text
from obsmem.storage import ProjectDatabase
from obsmem.validation import first_problem
from obsmem.validation import session_id as check_session_id

MAX_EVENT_CONTENT = 2_000_000
MAX_TOOL_FIELD = 256  # characters of a tool name or a tool call id
MAX_BATCH = 10_000

Role = Literal["user", "assistant", "tool", "system"]
EventType = Literal["message", "tool_call", "tool_result"]


class EventIn(BaseModel):
    """One conversation event as a client sends it."""

    model_config = ConfigDict(extra="forbid")

    seq: int | None = Field(
        default=None, strict=True, ge=1, le=MAX_SEQ, description="Position in the session; omitted: next."
    )
    role: Role
    type: EventType = "message"
    content: str = Field(default="", max_length=MAX_EVENT_CONTENT)
    tool_name: str | None = Field(default=None, max_length=MAX_TOOL_FIELD)
    tool_args: dict[str, Any] | list[Any] | str | None = Field(
        default=None, description="Arguments of a tool call (JSON), shown to the Observer beside the result."
    )
    tool_call_id: str | None = Field(default=None, max_length=MAX_TOOL_FIELD)
    created_at: datetime | None = Field(default=None, description="ISO 8601; default: when it was received.")

    @field_validator("content", "tool_name", "tool_call_id")
    @classmethod
    def _utf8(cls, value: str | None) -> str | None:
        # ASCII always encodes (a C-level scan, no copy); only other text can hold a lone surrogate.
        if value is not None and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("is not valid UTF-8 text") from None
        return value

    @field_validator("created_at", mode="before")
    @classmethod
    def _iso_text(cls, value: Any) -> Any:
        # A bare number would be read as a Unix time, in seconds or milliseconds depending on its size:
        # too easy to get wrong silently. Clients send ISO 8601 text (or a datetime from Python).
        if value is not None and not isinstance(value, (str, datetime)):
            raise ValueError("must be an ISO 8601 date-time string")
        return value

    @field_validator("created_at")
    @classmethod
    def _utc_in_range(cls, value: datetime | None) -> datetime | None:
        # An offset can push a stamp at the edge of the calendar (year 1 or 9999) out of range once it
        # is converted to UTC; refuse it here, as a validation error, rather than when it is stored.
        if value is not None and value.tzinfo is not None:
            try:
                value.astimezone(UTC)
            except OverflowError:
                raise ValueError("is out of range once converted to UTC") from None
        return value

    @field_validator("tool_args")
    @classmethod
    def _json_args(cls, value: Any) -> Any:
        if _flat_ascii_object(value):
            return value  # always encodes: no need to encode it here only to check (it is encoded when stored)
        if value is not None:
            problem = json_shape_problem(value)
            if problem is not None:
                raise ValueError(problem)
            try:
                canonical_json(value)
            except (UnicodeEncodeError, ValueError, TypeError, RecursionError):
                raise ValueError("must be JSON that encodes as UTF-8") from None
        return value

    def tool_args_json(self) -> str | None:
        """The arguments as stored: canonical JSON (sorted keys, compact)."""
        return None if self.tool_args is None else canonical_json(self.tool_args).decode("utf-8")

    def fingerprint(self, tool_args_json: str | None) -> str:
        """What makes two events at one seq the same event (the receive time does not)."""
        return event_fingerprint(self.role, self.type, self.content, self.tool_name, tool_args_json, self.tool_call_id)

    def created_at_iso(self) -> str:
        if self.created_at is None:
            return now_iso()
        stamp = self.created_at
        if stamp.tzinfo is not None:
            stamp = stamp.astimezone(UTC).replace(tzinfo=None)
        return stamp.isoformat(timespec="milliseconds") + "Z"


_EVENTS = TypeAdapter(list[EventIn])


def event_fingerprint(
    role: str, type: str, content: str, tool_name: str | None, tool_args_json: str | None, tool_call_id: str | None
) -> str:
    """What makes two events at one seq the same event (the receive time does not).

    Fields are length-prefixed into one SHA-256, which is several times cheaper than hashing a
    canonical JSON document of the event; this runs for every appended event.
    """
    pieces: list[bytes] = []
    for part in (role, type, content, tool_name, tool_args_json, tool_call_id):
        if part is None:
            pieces.append(b"\x00")
            continue
        data = part.encode("utf-8")
        pieces.append(b"\x01" + len(data).to_bytes(8, "big"))
        pieces.append(data)
    # One update of the joined bytes hashes the same stream as one update per field, in fewer calls.
    return hashlib.sha256(b"".join(pieces)).hexdigest()


def _flat_ascii_object(value: Any) -> bool:
    """An object of ASCII text keys and ASCII text values (most tool arguments): canonical JSON of it
    cannot fail, so checking it by encoding is skipped."""
    return (
        type(value) is dict
        and len(value) <= 64
        and all(
            type(key) is str and type(item) is str and key.isascii() and item.isascii() for key, item in value.items()
        )
    )


def parse_events(raw: Sequence[Any], field: str = "events") -> list[EventIn]:
    if isinstance(raw, (str, bytes)) or not isinstance(raw, Sequence):
        raise ValidationFailed(f"{field} must be a list of events", field=field)
    if len(raw) > MAX_BATCH:
        raise ValidationFailed(f"{field} holds more than {MAX_BATCH} events; send smaller batches", field=field)
    if all(isinstance(item, EventIn) for item in raw):
        return list(raw)
    try:
        return _EVENTS.validate_python(list(raw))
    except ValidationError as exc:
        raise first_problem(exc, field) from None


def redacted(event: EventIn) -> EventIn:
    """The event with secrets cut out of every text field: content (messages and tool results), tool name,
    tool arguments and tool call id. Role, type, seq and time are validated to fixed shapes."""
    update: dict[str, Any] = {}
    for name in ("content", "tool_name", "tool_call_id"):
        value = getattr(event, name)
        if value:
            cleaned = redact_text(value)
            if cleaned != value:
                update[name] = cleaned
    tool_args = redact_json(event.tool_args)
    if tool_args != event.tool_args:
        update["tool_args"] = tool_args
    return event.model_copy(update=update) if update else event


class PreparedEvent(NamedTuple):
    """An event validated and redacted, with what the append stores derived from it: its arguments as
    canonical JSON, its fingerprint and its time (None: the time it is appended).

    A plain tuple of text, so a transcript reader in another process can prepare events and hand them
    over cheaply; :func:`append_prepared` stores them without looking at them again.
    """

    seq: int | None
    role: str
    type: str
    content: str
    tool_name: str | None
    tool_args: str | None  # canonical JSON text
    tool_call_id: str | None
    created_at: str | None
    fingerprint: str


_ROLES = frozenset(("user", "assistant", "tool", "system"))
_TYPES = frozenset(("message", "tool_call", "tool_result"))
_PLAIN_FIELDS = frozenset(("seq", "role", "type", "content", "tool_name", "tool_args", "tool_call_id", "created_at"))
# ISO 8601 stamps that datetime.fromisoformat and the EventIn validator read alike (as agents write them).
_PLAIN_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{3}|\.\d{6})?(?:Z|[+-]\d{2}:\d{2})?")


def _plain_text(value: Any, limit: int) -> bool:
    """Text EventIn takes as it is: a str within ``limit`` characters that encodes as UTF-8."""
    if type(value) is not str or len(value) > limit:
        return False
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _plain_stamp(value: Any) -> tuple[bool, str | None]:
    """``(True, the stored form)`` of no stamp (None) or a plain ISO 8601 stamp; ``(False, None)`` else."""
    if value is None:
        return True, None
    if type(value) is not str or _PLAIN_STAMP.fullmatch(value) is None:
        return False, None
    try:
        stamp = datetime.fromisoformat(value)
        if stamp.tzinfo is not None:
            stamp = stamp.astimezone(UTC).replace(tzinfo=None)
    except (ValueError, OverflowError):
        return False, None
    return True, stamp.isoformat(timespec="milliseconds") + "Z"


def prepare_plain(fields: dict[str, Any]) -> PreparedEvent | None:
    """:func:`prepare_event` of ``EventIn.model_validate(fields)`` without building the model, for the
    plain events transcript readers and most clients make (known fields of exact types, a plain ISO 8601
    stamp, tool arguments that encode as JSON); None for anything else, which takes the validated way.
    On the hot path of every appended event; ``tests/test_events_prepared.py`` checks it against the model."""
    if not _PLAIN_FIELDS.issuperset(fields):
        return None
    seq = fields.get("seq")
    if seq is not None and (type(seq) is not int or not 1 <= seq <= MAX_SEQ):
        return None
    role = fields.get("role")
    kind = fields.get("type", "message")
    content = fields.get("content", "")
    tool_name = fields.get("tool_name")
    call_id = fields.get("tool_call_id")
    # The types first: a list or an object is unhashable, so testing it against the sets would raise.
    if type(role) is not str or type(kind) is not str or role not in _ROLES or kind not in _TYPES:
        return None
    if not _plain_text(content, MAX_EVENT_CONTENT):
        return None
    if (tool_name is not None and not _plain_text(tool_name, MAX_TOOL_FIELD)) or (
        call_id is not None and not _plain_text(call_id, MAX_TOOL_FIELD)
    ):
        return None
    plain_stamp, created_at = _plain_stamp(fields.get("created_at"))
    if not plain_stamp:
        return None
    args = fields.get("tool_args")
    if args is not None:
        if type(args) is dict:
            if not all(type(key) is str for key in args):
                return None
        elif type(args) is not list and type(args) is not str:
            return None
        if not _flat_ascii_object(args) and json_shape_problem(args) is not None:
            return None  # the validator says what is wrong
        try:
            if not _flat_ascii_object(args):
                canonical_json(args)  # as the validator checks them: before redaction
            args_json: str | None = canonical_json(redact_json(args)).decode("utf-8")
        except (UnicodeEncodeError, ValueError, TypeError, RecursionError):
            return None
    else:
        args_json = None
    content = redact_text(content) if content else content
    tool_name = redact_text(tool_name) if tool_name else tool_name
    call_id = redact_text(call_id) if call_id else call_id
    fingerprint = event_fingerprint(role, kind, content, tool_name, args_json, call_id)
    return PreparedEvent(seq, role, kind, content, tool_name, args_json, call_id, created_at, fingerprint)


def prepare_event(event: EventIn) -> PreparedEvent:
    """The validated event redacted, with its stored arguments, fingerprint and time derived."""
    clean = redacted(event)
    args_json = clean.tool_args_json()
    return PreparedEvent(
        clean.seq,
        clean.role,
        clean.type,
        clean.content,
        clean.tool_name,
        args_json,
        clean.tool_call_id,
        clean.created_at_iso() if clean.created_at is not None else None,
        clean.fingerprint(args_json),
    )


class StoredEvent(NamedTuple):
    """An event as stored (after redaction), handed to ``after_insert`` hooks.

    A named tuple rather than a dataclass: one is built for every appended event, and a tuple is built
    several times faster."""

    seq: int
    role: str
    type: str
    content: str
    tool_name: str | None
    tool_args: str | None  # JSON text
    tool_call_id: str | None
    created_at: str


AfterInsert = Callable[[apsw.Connection, str, list[StoredEvent]], None]


@dataclass(frozen=True)
class AppendReceipt:
    appended: int
    duplicates: int
    last_seq: int

    def to_dict(self) -> dict[str, int]:
        return {"appended": self.appended, "duplicates": self.duplicates, "last_seq": self.last_seq}


def append_events(
    db: ProjectDatabase,
    session: str,
    events: Iterable[EventIn | dict[str, Any]],
    *,
    after_insert: AfterInsert | None = None,
) -> AppendReceipt:
    """Append a batch atomically; see the module docstring for the seq rules and the hook."""
    session = check_session_id(session)
    raw = list(events)
    batch = _prepare_plain_batch(raw)
    if batch is None:
        batch = [prepare_event(event) for event in parse_events(raw)]
    return append_prepared(db, session, batch, after_insert=after_insert)


def _prepare_plain_batch(raw: list[Any]) -> list[PreparedEvent] | None:
    """Every event of the batch prepared the plain way, or None if one is not plain (the batch is then
    validated through the model, which names the first problem as before)."""
    if len(raw) > MAX_BATCH:
        return None
    batch: list[PreparedEvent] = []
    for event in raw:
        prepared = prepare_plain(event) if type(event) is dict else None
        if prepared is None:
            return None
        batch.append(prepared)
    return batch


def append_prepared(
    db: ProjectDatabase,
    session: str,
    batch: Sequence[PreparedEvent],
    *,
    seqs: Sequence[int | None] | None = None,
    after_insert: AfterInsert | None = None,
) -> AppendReceipt:
    """Append prepared events atomically (:func:`append_events` without the validation and redaction,
    which :func:`prepare_event` did). ``seqs`` overrides the events' own seqs (an importer numbering
    events of a transcript), so numbering them makes no new tuple per event."""
    session = check_session_id(session)
    if len(batch) > MAX_BATCH:
        raise ValidationFailed(f"events holds more than {MAX_BATCH} events; send smaller batches", field="events")
    wanted = [event.seq for event in batch] if seqs is None else list(seqs)
    now = now_iso()
    with db.write() as conn:
        row = conn.execute("SELECT last_seq FROM sessions WHERE session_id = ?", (session,)).fetchone()
        if row is None:
            conn.execute(
                "INSERT INTO sessions(session_id, created_at, updated_at) VALUES (?, ?, ?)", (session, now, now)
            )
            last_seq = 0
        else:
            last_seq = row[0]
        explicit = [seq for seq in wanted if seq is not None]
        stored = fingerprints_by_seq(conn, session, min(explicit), max(explicit)) if explicit else {}
        rows: list[tuple[Any, ...]] = []
        duplicates = 0
        next_seq = last_seq
        for index, (event, given) in enumerate(zip(batch, wanted, strict=True)):
            seq = given if given is not None else next_seq + 1
            if seq > MAX_SEQ:
                raise ValidationFailed(f"events.{index}.seq: exceeds {MAX_SEQ}", field=f"events.{index}.seq")
            fingerprint = event.fingerprint
            known = stored.get(seq)
            if known is not None:
                if known != fingerprint:
                    raise SeqConflict(
                        f"events.{index}: seq {seq} of session '{session}' already holds a different event",
                        field=f"events.{index}.seq",
                        details={"seq": seq},
                    )
                duplicates += 1
                continue
            stored[seq] = fingerprint
            next_seq = max(next_seq, seq)
            rows.append(
                (
                    session,
                    seq,
                    event.role,
                    event.type,
                    event.content,
                    event.tool_name,
                    event.tool_args,
                    event.tool_call_id,
                    event.created_at or now,
                    fingerprint,
                )
            )
        if rows:
            conn.executemany(
                "INSERT INTO events(session_id, seq, role, type, content, tool_name, tool_args, tool_call_id,"
                " created_at, fingerprint) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            last_seq = max(last_seq, next_seq)
            conn.execute(
                "UPDATE sessions SET last_seq = ?, event_count = event_count + ?, updated_at = ? WHERE session_id = ?",
                (last_seq, len(rows), now, session),
            )
            if after_insert is not None:
                after_insert(conn, session, [StoredEvent(*row[1:9]) for row in rows])
    return AppendReceipt(appended=len(rows), duplicates=duplicates, last_seq=last_seq)


def require_session(conn: apsw.Connection, session_id: str) -> None:
    """A session without events has nothing to observe or reflect on: say so instead of queueing a job."""
    if conn.execute("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)).fetchone() is None:
        raise NotFound(f"session '{session_id}' has no events", code="session_not_found", field="session_id")


@dataclass(frozen=True)
class SessionTotals:
    """A project's sessions, their events and when the newest one last changed (None: no sessions)."""

    sessions: int
    events: int
    last_activity: str | None


def session_totals(conn: apsw.Connection) -> SessionTotals:
    # An aggregate without GROUP BY always returns exactly one row.
    ((sessions, events, last),) = conn.execute(
        "SELECT count(*), coalesce(sum(event_count), 0), max(updated_at) FROM sessions"
    ).fetchall()
    return SessionTotals(cast(int, sessions), cast(int, events), cast(str | None, last))


def last_seq(conn: apsw.Connection, session_id: str) -> int:
    """The session's last seq (0 for a session without events)."""
    row = conn.execute("SELECT last_seq FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
    return 0 if row is None else int(row[0])


def fingerprints_by_seq(conn: apsw.Connection, session_id: str, lowest: int, highest: int) -> dict[int, str]:
    """The fingerprints of the session's stored events with seqs from ``lowest`` to ``highest``, by seq: what a
    batch of events at those seqs is compared with (a different fingerprint at a used seq is a conflict)."""
    rows = conn.execute(
        "SELECT seq, fingerprint FROM events WHERE session_id = ? AND seq BETWEEN ? AND ?",
        (session_id, lowest, highest),
    )
    return {cast(int, seq): cast(str, fingerprint) for seq, fingerprint in rows}


def event_fingerprints(conn: apsw.Connection, session_id: str) -> list[str]:
    """The fingerprints of the session's stored events (what makes two events at one seq the same), in
    seq order: an importer merging a rewritten transcript tells stored events from new ones by them."""
    rows = conn.execute("SELECT fingerprint FROM events WHERE session_id = ? ORDER BY seq", (session_id,))
    return [row[0] for row in rows]


# Events the trigram index takes in one write transaction: short enough not to keep appends waiting
# (about a quarter of a second of work), long enough that a catch-up of a large import is few commits.
TRIGRAM_BATCH_EVENTS = 5000


def index_event_trigrams(db: ProjectDatabase, *, max_events: int | None = None) -> int:
    """Move the event trigram index, the event id keys and the date order forward (see
    ``m0006_conversation``): events above their watermark are indexed in id order,
    :data:`TRIGRAM_BATCH_EVENTS` per transaction, each with the watermark it reaches.

    Appends never pay for the index; exact search scans what is not indexed yet, so this changes how fast
    a search is, never its answer. ``max_events`` bounds one call (None: until caught up). Returns the
    number of events indexed."""
    done = 0
    with db.read() as conn:  # caught up: a plain read, no write transaction (housekeeping asks every pass)
        if not conn.execute(
            "SELECT EXISTS (SELECT 1 FROM events WHERE id > (SELECT indexed_through FROM event_trigram_progress))"
        ).fetchone()[0]:
            return 0
    while max_events is None or done < max_events:
        batch = TRIGRAM_BATCH_EVENTS if max_events is None else min(TRIGRAM_BATCH_EVENTS, max_events - done)
        with db.write() as conn:
            through = conn.execute("SELECT indexed_through FROM event_trigram_progress").fetchone()[0]
            last = conn.execute(
                "SELECT max(id), count(*) FROM (SELECT id FROM events WHERE id > ? ORDER BY id LIMIT ?)",
                (through, batch),
            ).fetchone()
            if last[0] is None:
                return done
            conn.execute(
                "INSERT INTO event_trigrams(rowid, content)"
                " SELECT id, content || char(1, 1) || coalesce(tool_args || char(1, 1), '')"
                " FROM events WHERE id > ? AND id <= ?",
                (through, last[0]),
            )
            conn.execute(
                "INSERT INTO event_keys(key, event_row)"
                " SELECT substr(obsmem_event_id(session_id, seq), 1, 12), id FROM events WHERE id > ? AND id <= ?",
                (through, last[0]),
            )
            conn.execute("UPDATE events SET in_date_order = 1 WHERE id > ? AND id <= ?", (through, last[0]))
            conn.execute("UPDATE event_trigram_progress SET indexed_through = ?", (last[0],))
        done += last[1]
        if last[1] < batch:  # the batch reached the last event: caught up, without one more transaction
            return done
    return done


# Events one housekeeping pass indexes per project at most (a few seconds of work), so a large import is
# caught up over a few passes without holding up the other projects' housekeeping.
HOUSEKEEPING_TRIGRAM_EVENTS = 100_000


def index_conversation_step(project: str, db: ProjectDatabase) -> None:
    """The workers' housekeeping task: index up to :data:`HOUSEKEEPING_TRIGRAM_EVENTS` more events."""
    index_event_trigrams(db, max_events=HOUSEKEEPING_TRIGRAM_EVENTS)


def unindexed_events(conn: apsw.Connection) -> int:
    """Events above the trigram index's watermark (exact search scans them directly)."""
    through = conn.execute("SELECT indexed_through FROM event_trigram_progress").fetchone()[0]
    return conn.execute("SELECT count(*) FROM events WHERE id > ?", (through,)).fetchone()[0]
