"""The shapes search and recall return, the same in every mode and on every surface."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from obsmem.dates import display_minute
from obsmem.ids import display_id

# Columns every memory hit is built from, in this order (see Hit.from_row).
HIT_COLUMNS = "m.memory_id, m.kind, m.session_id, m.date, m.importance, m.content"
# An event's time in the memories' stored format: ``2024-05-01T09:30:12.345Z`` -> ``2024-05-01 09:30:12``.
EVENT_DATE = "replace(substr(m.created_at, 1, 19), 'T', ' ')"
# Columns an event hit is built from (``m`` is the events table): the memory columns' order, then the
# event's place in its session and its tool fields.
# The id is derived from the address by the SQL function every obsmem connection registers (m0006).
EVENT_COLUMNS = (
    f"obsmem_event_id(m.session_id, m.seq), 'event', m.session_id, {EVENT_DATE}, NULL, m.content, m.seq, m.role,"
    " m.type, m.tool_name, m.tool_args"
)
EVENT_KIND = "event"


NOTHING_HOLDS_NAMES = "No indexed memory mentions {names}."
NOTHING_CLOSE = (
    "No memory was close enough to the query to return (the best match is below the configured "
    "min_relevance). This does not prove nothing relevant is stored: a memory may say it in other words, "
    "sit outside the dates or session searched, or not be indexed yet. Try an identifier, other words, "
    "or an exact search."
)


@dataclass(frozen=True)
class Hit:
    """A search hit: a memory (``observation`` or ``reflection``) or a conversation event (``event``).

    For an event, ``memory_id`` holds the event's id and the event fields are set."""

    memory_id: str
    kind: str
    session_id: str
    date: str
    importance: str | None
    content: str
    seq: int | None = None  # events only, as the fields below
    role: str | None = None
    type: str | None = None
    tool_name: str | None = None
    tool_args: Any = None  # parsed JSON

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Hit:
        memory_id, kind, session_id, stored_date, importance, content = row[:6]
        if kind != EVENT_KIND:
            return cls(memory_id, kind, session_id, display_minute(stored_date), importance, content)
        seq, role, event_type, tool_name, tool_args = row[6:11]
        return cls(
            memory_id,
            kind,
            session_id,
            display_minute(stored_date),
            None,
            content,
            seq,
            role,
            event_type,
            tool_name,
            None if tool_args is None else json.loads(tool_args),
        )

    @property
    def id(self) -> str:
        return display_id(self.memory_id)

    @property
    def is_event(self) -> bool:
        return self.kind == EVENT_KIND

    def to_dict(self) -> dict[str, Any]:
        if self.is_event:
            return self._event_dict()
        body: dict[str, Any] = {
            "id": self.id,
            "memory_id": self.memory_id,
            "kind": self.kind,
            "session_id": self.session_id,
            "date": self.date,
        }
        if self.kind == "observation":
            body["importance"] = self.importance
        body["content"] = self.content
        return body

    def _event_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self.id,
            "event_id": self.memory_id,
            "kind": self.kind,
            "session_id": self.session_id,
            "seq": self.seq,
            "role": self.role,
            "type": self.type,
            "date": self.date,
            "content": self.content,
        }
        if self.tool_name is not None:
            body["tool_name"] = self.tool_name
        if self.tool_args is not None:
            body["tool_args"] = self.tool_args
        return body


@dataclass
class SearchResult:
    mode: str
    hits: list[Hit] = field(default_factory=list)
    truncated: bool = False
    partial: bool = False
    # Hybrid search with ``min_relevance`` found candidates but none close enough, so it returned none.
    nothing_close: bool = False
    # With ``nothing_close``: the names of the query no indexed memory holds, when that was the reason
    # (``relevance_measure`` with ``names``); words of the query, never of a memory.
    unknown_names: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "mode": self.mode,
            "hits": [hit.to_dict() for hit in self.hits],
            "truncated": self.truncated,
            "partial": self.partial,
        }
        if self.nothing_close:  # only then: every other answer keeps its four keys
            body["nothing_close"] = True
            body["note"] = NOTHING_CLOSE
            if self.unknown_names:
                body["unknown_names"] = list(self.unknown_names)
                body["note"] = NOTHING_HOLDS_NAMES.format(names=", ".join(self.unknown_names)) + " " + NOTHING_CLOSE
        return body


# -- recall -----------------------------------------------------------------------------------------
# Recall builds these from its rows and the app floor wraps them unchanged, so there is one place where a
# recalled memory is constructed and one ``to_dict`` per shape (the JSON every surface publishes).


@dataclass(frozen=True)
class SourceRef:
    """An event an observation cites."""

    session_id: str
    seq: int

    def to_dict(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "seq": self.seq}


@dataclass(frozen=True)
class RecalledMemory:
    """The recalled memory: a hit plus when it was stored and what it cites (by kind)."""

    id: str
    memory_id: str
    kind: str
    session_id: str
    date: str
    content: str
    created_at: str
    importance: str | None = None  # observations only
    source_refs: tuple[SourceRef, ...] = ()  # observations only
    supporting_observation_ids: tuple[str, ...] = ()  # reflections only

    @classmethod
    def from_hit(
        cls,
        hit: Hit,
        created_at: str,
        *,
        source_refs: tuple[SourceRef, ...] = (),
        supporting_observation_ids: tuple[str, ...] = (),
    ) -> RecalledMemory:
        return cls(
            id=hit.id,
            memory_id=hit.memory_id,
            kind=hit.kind,
            session_id=hit.session_id,
            date=hit.date,
            content=hit.content,
            created_at=created_at,
            importance=hit.importance,
            source_refs=source_refs,
            supporting_observation_ids=supporting_observation_ids,
        )

    def to_dict(self) -> dict[str, Any]:
        # The hit's own fields in the hit's order, then what recall adds.
        hit = Hit(self.memory_id, self.kind, self.session_id, self.date, self.importance, self.content)
        body = hit.to_dict() | {"created_at": self.created_at}
        if self.kind == "observation":
            body["source_refs"] = [ref.to_dict() for ref in self.source_refs]
        else:
            body["supporting_observation_ids"] = list(self.supporting_observation_ids)
        return body


@dataclass(frozen=True)
class SourceEvent:
    """An event an observation cites; the tool fields appear in its JSON only when the event has them."""

    session_id: str
    seq: int
    role: str
    type: str
    content: str
    tool_name: str | None = None
    tool_args: Any = None
    tool_call_id: str | None = None
    created_at: str = ""  # always set; the default only because it follows the optional tool fields

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "session_id": self.session_id,
            "seq": self.seq,
            "role": self.role,
            "type": self.type,
            "content": self.content,
        }
        if self.tool_name is not None:
            body["tool_name"] = self.tool_name
        if self.tool_args is not None:
            body["tool_args"] = self.tool_args
        if self.tool_call_id is not None:
            body["tool_call_id"] = self.tool_call_id
        body["created_at"] = self.created_at
        return body


class RecallParts(NamedTuple):
    """What recall finds: the memory, the events it cites (observations) and the observations that
    support it (reflections); the kind that does not apply is empty."""

    memory: RecalledMemory
    sources: tuple[SourceEvent, ...]
    supporting: tuple[Hit, ...]


@dataclass(frozen=True)
class RecalledEvent:
    """A conversation event recalled by its id: the event, the events around it in its session and the
    observations that cite it."""

    event: SourceEvent
    event_id: str
    before: tuple[SourceEvent, ...]  # up to the configured window, oldest first
    after: tuple[SourceEvent, ...]
    cited_by: tuple[Hit, ...]  # observations citing the event, oldest first

    def to_dict(self) -> dict[str, Any]:
        event = {"id": display_id(self.event_id), "event_id": self.event_id, "kind": EVENT_KIND}
        return {
            "event": event | self.event.to_dict(),
            "before": [item.to_dict() for item in self.before],
            "after": [item.to_dict() for item in self.after],
            "cited_by": [hit.to_dict() for hit in self.cited_by],
        }
