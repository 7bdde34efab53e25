"""Memory items: the session's active memory as every stage reads it (the shared floor of the wings).

The *active memory* of a session is every reflection and every observation that no promoted generation
dropped. The Observer is shown part of it as context, the reflection threshold measures its observations,
and the projection renders it; the queries here are the one place that decides what is active.
"""

from __future__ import annotations

from typing import NamedTuple

import apsw

from obsmem.framing import inline_memory_text
from obsmem.pipeline.tokens import estimate_tokens, sql_estimate

_RANK = {"reflection": 5, "critical": 4, "high": 3, "medium": 2, "low": 1}


class MemoryItem(NamedTuple):
    """A reflection or observation as the packer, the ledger and the projection use it.

    A tuple: cheap by the thousand.
    """

    memory_id: str
    kind: str  # "reflection" | "observation"
    timestamp: str  # "YYYY-MM-DD HH:MM"
    importance: str | None
    content: str

    def line(self) -> str:
        content = inline_memory_text(self.content)  # shown to a model inside a block it must not leave
        if self.kind == "reflection":
            return f"- [{self.memory_id[:12]}] {self.timestamp} {content}"
        return f"- [{self.memory_id[:12]}] {self.timestamp} ({self.importance}) {content}"

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.line()) + 1

    @property
    def rank(self) -> int:
        return _RANK["reflection"] if self.kind == "reflection" else _RANK.get(self.importance or "low", 1)


def active_memory(conn: apsw.Connection, session_id: str) -> list[MemoryItem]:
    """The session's active reflections and observations, reflections first, each in time order."""
    # One query per kind, each read in index order: sorting all rows in one query costs more than both.
    items: list[MemoryItem] = []
    for kind in ("reflection", "observation"):
        rows = conn.execute(
            "SELECT m.memory_id, m.kind, substr(m.date, 1, 16), m.importance, m.content FROM memories AS m"
            " WHERE m.session_id = ? AND m.kind = ?"
            " AND NOT EXISTS (SELECT 1 FROM dropped_observations AS d WHERE d.observation_row = m.id)"
            " ORDER BY m.date, m.id",
            (session_id, kind),
        )
        items.extend(map(MemoryItem._make, rows))
    return items


def active_observation_tokens(conn: apsw.Connection, session_id: str) -> int:
    """Estimated tokens of the session's active observations (what the reflection threshold measures)."""
    row = conn.execute(
        f"SELECT coalesce(sum({sql_estimate('m.content')}), 0) FROM memories AS m"
        " WHERE m.session_id = ? AND m.kind = 'observation'"
        " AND NOT EXISTS (SELECT 1 FROM dropped_observations AS d WHERE d.observation_row = m.id)",
        (session_id,),
    ).fetchone()
    return round(row[0]) if row is not None else 0  # an aggregate always has its one row


def active_observation_ids(conn: apsw.Connection, session_id: str) -> list[str]:
    return [
        row[0]
        for row in conn.execute(
            "SELECT m.memory_id FROM memories AS m WHERE m.session_id = ? AND m.kind = 'observation'"
            " AND NOT EXISTS (SELECT 1 FROM dropped_observations AS d WHERE d.observation_row = m.id)",
            (session_id,),
        )
    ]


def memory_exists(conn: apsw.Connection, memory_id: str) -> bool:
    """Whether a memory with this full id is stored (in any session)."""
    return conn.execute("SELECT 1 FROM memories WHERE memory_id = ?", (memory_id,)).fetchone() is not None
