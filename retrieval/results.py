"""The shapes search and recall return, the same in every mode and on every surface."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from obsmem.dates import display_minute
from obsmem.ids import display_id

# Columns every hit is built from, in this order (see Hit.from_row).
HIT_COLUMNS = "m.memory_id, m.kind, m.session_id, m.date, m.importance, m.content"


@dataclass(frozen=True)
class Hit:
    memory_id: str
    kind: str
    session_id: str
    date: str
    importance: str | None
    content: str

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Hit:
        memory_id, kind, session_id, stored_date, importance, content = row[:6]
        return cls(memory_id, kind, session_id, display_minute(stored_date), importance, content)

    @property
    def id(self) -> str:
        return display_id(self.memory_id)

    def to_dict(self) -> dict[str, Any]:
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


@dataclass
class SearchResult:
    mode: str
    hits: list[Hit] = field(default_factory=list)
    truncated: bool = False
    partial: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "hits": [hit.to_dict() for hit in self.hits],
            "truncated": self.truncated,
            "partial": self.partial,
        }
