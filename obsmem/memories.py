"""Memories: observations (cite source events) and reflections (cite observations).

Writes are validated item by item. A bad item is rejected with a reason and never stops the others; an
item whose id already exists is a duplicate, so an observer that retries never writes twice. Every write
of a batch commits in one ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import apsw
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from obsmem import ids
from obsmem.bounds import MAX_SEQ, is_strict_int
from obsmem.dates import now_iso, now_stored, parse_timestamp, stored_minute
from obsmem.errors import ObsmemError, ValidationFailed
from obsmem.redaction import redact_text
from obsmem.storage import ProjectDatabase
from obsmem.validation import (
    CONTROL_CHARACTERS,
    LINE_BREAKS,
    SESSION_ID,
    first_problem,
    secret_free_identifier,
    session_id_text,
)

Importance = Literal["low", "medium", "high", "critical"]
IMPORTANCE_LEVELS: tuple[str, ...] = ("low", "medium", "high", "critical")
MAX_MEMORY_CHARS = 4000
MAX_SOURCE_REFS = 500
# Shown in the JSON schema (for clients and agents' tool definitions); checked by session_id_text, whose
# message says the rule in words.
SESSION_PATTERN = f"^{SESSION_ID.pattern}$"


class SourceRef(BaseModel):
    """A cited event. ``session_id`` defaults to the observation's own session."""

    model_config = ConfigDict(extra="forbid")

    session_id: str | None = Field(default=None, json_schema_extra={"pattern": SESSION_PATTERN})
    seq: int = Field(strict=True, ge=1, le=MAX_SEQ)

    _well_formed = field_validator("session_id")(session_id_text)
    _secret_free = field_validator("session_id")(secret_free_identifier)


def memory_content(value: str) -> str:
    """A memory's content: one non-empty line, with secrets redacted before it can be stored (the length
    limit, :data:`MAX_MEMORY_CHARS`, is checked by each write: an observation's before redaction, a
    reflection's after)."""
    try:
        value.encode("utf-8")  # first: redaction scans the text as UTF-8
    except UnicodeEncodeError:
        raise ValueError("is not valid UTF-8 text") from None
    value = redact_text(value)
    if not value.strip():
        raise ValueError("must not be empty")
    if LINE_BREAKS.search(value):
        raise ValueError("must be a single line (no line breaks)")
    if CONTROL_CHARACTERS.search(value):
        raise ValueError("must not contain control characters")
    return value.strip()


class ObservationIn(BaseModel):
    """One observation as an observer writes it."""

    model_config = ConfigDict(extra="forbid")

    session_id: str = Field(json_schema_extra={"pattern": SESSION_PATTERN})
    content: str = Field(max_length=MAX_MEMORY_CHARS, description="One line.")
    timestamp: str = Field(description="'YYYY-MM-DD HH:MM' in the conversation's clock.")
    importance: Importance = "medium"
    source_refs: list[SourceRef | int] = Field(min_length=1, max_length=MAX_SOURCE_REFS)

    _check_content = field_validator("content")(memory_content)
    _well_formed = field_validator("session_id")(session_id_text)
    _secret_free = field_validator("session_id")(secret_free_identifier)
    _memory_id: str | None = PrivateAttr(default=None)

    @field_validator("source_refs", mode="before")
    @classmethod
    def _bounded_seqs(cls, value: Any) -> Any:
        # A bare seq is checked here, before pydantic's lax int (which takes "1" and true) and before
        # SQLite (which cannot bind an integer beyond 64 bits): either would let a bad ref through.
        if isinstance(value, list):
            for position, ref in enumerate(value):
                if isinstance(ref, (dict, SourceRef)):
                    continue
                if not is_strict_int(ref):
                    raise ValueError(
                        f"entry {position} must be an event seq (an integer) or a {{session_id, seq}} object"
                    )
                if not 1 <= ref <= MAX_SEQ:
                    raise ValueError(f"entry {position} must be a seq between 1 and {MAX_SEQ}")
        return value

    @field_validator("timestamp")
    @classmethod
    def _minute(cls, value: str) -> str:
        try:
            return parse_timestamp(value)
        except ObsmemError as exc:
            raise ValueError(exc.message) from None

    def refs(self) -> list[tuple[str, int]]:
        pairs = []
        for ref in self.source_refs:
            if isinstance(ref, int):
                pairs.append((self.session_id, ref))
            else:
                pairs.append((ref.session_id or self.session_id, ref.seq))
        return ids.normalise_source_refs(pairs)

    def memory_id(self) -> str:
        # Cached: writers compute it before taking the write lock (hashing is the costly part of a write).
        if self._memory_id is None:
            self._memory_id = ids.observation_id(self.session_id, self.timestamp, self.content, self.refs())
        return self._memory_id


@dataclass(frozen=True)
class WrittenItem:
    """An item of a write that is stored: newly added, or a duplicate of one already stored.

    Typed so callers read fields by name; ``to_dict`` is the wire shape every surface emits."""

    index: int
    id: str
    memory_id: str

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "id": self.id, "memory_id": self.memory_id}


@dataclass(frozen=True)
class RejectedItem:
    """An item of a write that was refused, with the error's code and (secret-free) message."""

    index: int
    code: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "code": self.code, "message": self.message}


@dataclass
class WriteReceipt:
    """What happened to each item of a memory write, by its index in the request."""

    added: list[WrittenItem] = field(default_factory=list)
    duplicates: list[WrittenItem] = field(default_factory=list)
    rejected: list[RejectedItem] = field(default_factory=list)

    def reject(self, index: int, error: ObsmemError) -> None:
        self.rejected.append(RejectedItem(index=index, code=error.code, message=error.message))

    def to_dict(self) -> dict[str, Any]:
        return {
            "added": [item.to_dict() for item in self.added],
            "duplicates": [item.to_dict() for item in self.duplicates],
            "rejected": [item.to_dict() for item in self.rejected],
        }


def parse_observation(index: int, raw: Any) -> ObservationIn:
    """Validate item ``index`` of a write; errors name it as ``observations.<index>.<field>``."""
    if isinstance(raw, ObservationIn):
        return raw
    if not isinstance(raw, dict):
        raise ValidationFailed(f"observations.{index}: must be an object", field=f"observations.{index}")
    try:
        return ObservationIn.model_validate(raw)
    except ValidationError as exc:
        raise first_problem(exc, f"observations.{index}") from None


def _missing_refs(conn: apsw.Connection, refs: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    return [
        ref
        for ref in refs
        if conn.execute("SELECT 1 FROM events WHERE session_id = ? AND seq = ?", ref).fetchone() is None
    ]


def _no_events(session: str) -> ValidationFailed:
    return ValidationFailed(f"session '{session}' has no events", code="session_not_found")


def add_observations(
    db: ProjectDatabase | None, items: Sequence[Any], *, conn: apsw.Connection | None = None
) -> WriteReceipt:
    """Validate and store observations; pass ``conn`` to join a transaction the caller holds.

    ``db`` None stands for a project that does not exist yet: it has no events for an observation to
    cite, so every valid item is rejected (``session_not_found``) and no project is created for nothing.
    """
    receipt = WriteReceipt()
    parsed: list[tuple[int, ObservationIn]] = []
    for index, raw in enumerate(items):
        try:
            parsed.append((index, parse_observation(index, raw)))
        except ObsmemError as exc:
            receipt.reject(index, exc)
    if db is None and conn is None:
        for index, item in parsed:
            receipt.reject(index, _no_events(item.session_id))
        receipt.rejected.sort(key=lambda entry: entry.index)
        return receipt
    if not parsed:
        return receipt
    for _, item in parsed:
        item.memory_id()  # hash outside the write lock
    if conn is not None:
        _store_observations(conn, parsed, receipt)
    else:
        assert db is not None
        with db.write() as write_conn:
            _store_observations(write_conn, parsed, receipt)
    receipt.added.sort(key=lambda item: item.index)
    return receipt


def _store_observations(conn: apsw.Connection, parsed: list[tuple[int, ObservationIn]], receipt: WriteReceipt) -> None:
    now = now_iso()
    known_sessions: dict[str, bool] = {}
    for index, item in parsed:
        if item.session_id not in known_sessions:
            known_sessions[item.session_id] = (
                conn.execute("SELECT 1 FROM sessions WHERE session_id = ?", (item.session_id,)).fetchone() is not None
            )
        if not known_sessions[item.session_id]:
            receipt.reject(index, _no_events(item.session_id))
            continue
        refs = item.refs()
        missing = _missing_refs(conn, refs)
        if missing:
            shown = ", ".join(f"{sid}#{seq}" for sid, seq in missing[:5])
            receipt.reject(
                index,
                ValidationFailed(f"source_refs cite events that do not exist: {shown}", code="unknown_source_ref"),
            )
            continue
        memory_id = item.memory_id()
        entry = WrittenItem(index=index, id=ids.display_id(memory_id), memory_id=memory_id)
        row = conn.execute(
            "INSERT INTO memories(memory_id, kind, session_id, content, date, importance, created_at)"
            " VALUES (?, 'observation', ?, ?, ?, ?, ?) ON CONFLICT(memory_id) DO NOTHING RETURNING id",
            (memory_id, item.session_id, item.content, stored_minute(item.timestamp), item.importance, now),
        ).fetchone()
        if row is None:
            receipt.duplicates.append(entry)
            continue
        conn.executemany(
            "INSERT INTO observation_sources(memory_row, session_id, seq) VALUES (?, ?, ?)",
            [(row[0], sid, seq) for sid, seq in refs],
        )
        receipt.added.append(entry)


@dataclass(frozen=True)
class ReflectionIn:
    """A reflection as the Reflector proposes it: supported by existing observations (full ids)."""

    session_id: str
    content: str
    supporting_observation_ids: tuple[str, ...]
    timestamp: str | None = None  # 'YYYY-MM-DD HH:MM'; default: now (UTC)


def add_reflection(conn: apsw.Connection, reflection: ReflectionIn) -> tuple[str, bool]:
    """Store one reflection inside the caller's write transaction. Returns ``(memory_id, added)``.

    Raises :class:`ValidationFailed` if the content is not one line or a supporting id is unknown.
    """
    try:
        content = memory_content(reflection.content)
    except ValueError as exc:
        raise ValidationFailed(f"content {exc}", field="content") from None
    if len(content) > MAX_MEMORY_CHARS:
        raise ValidationFailed(f"content is longer than {MAX_MEMORY_CHARS} characters", field="content")
    if not reflection.supporting_observation_ids:
        raise ValidationFailed("a reflection needs at least one supporting observation", field="supporting")
    stored = stored_minute(parse_timestamp(reflection.timestamp)) if reflection.timestamp else now_stored()
    rows: list[int] = []
    for memory_id in sorted(set(reflection.supporting_observation_ids)):
        found = conn.execute(
            "SELECT id FROM memories WHERE memory_id = ? AND kind = 'observation'", (memory_id,)
        ).fetchone()
        if found is None:
            raise ValidationFailed(
                f"supporting observation {ids.display_id(memory_id)} does not exist", code="unknown_observation"
            )
        rows.append(found[0])
    memory_id = ids.reflection_id(reflection.session_id, stored[:16], content, reflection.supporting_observation_ids)
    row = conn.execute(
        "INSERT INTO memories(memory_id, kind, session_id, content, date, importance, created_at)"
        " VALUES (?, 'reflection', ?, ?, ?, NULL, ?) ON CONFLICT(memory_id) DO NOTHING RETURNING id",
        (memory_id, reflection.session_id, content, stored, now_iso()),
    ).fetchone()
    if row is None:
        return memory_id, False
    conn.executemany(
        "INSERT INTO reflection_supports(reflection_row, observation_row) VALUES (?, ?)",
        [(row[0], observation_row) for observation_row in rows],
    )
    return memory_id, True


def delete_memory(conn: apsw.Connection, row_id: int) -> None:
    """Delete one memory row inside the caller's write transaction.

    Its support, source and generation links go with it (the schema cascades); the events it cites stay.
    """
    conn.execute("DELETE FROM memories WHERE id = ?", (row_id,))


def memory_counts(conn: apsw.Connection) -> dict[str, int]:
    """How many memories of each kind the project holds: ``{"observation": n, "reflection": m}``."""
    rows = conn.execute("SELECT kind, count(*) FROM memories GROUP BY kind").fetchall()
    found = {cast(str, kind): cast(int, count) for kind, count in rows}
    return {kind: found.get(kind, 0) for kind in ("observation", "reflection")}
