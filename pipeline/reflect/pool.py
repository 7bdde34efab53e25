"""The active memory pool of a session, as the Reflector and Dropper see it, and the ids models cite.

The *active memory* is every reflection of the session and every observation no promoted generation
dropped. Each active observation has a **coverage tier**: how many reflections cite it as support —
none (``not covered``), one (``partly covered``) or two or more (``strongly covered``). The tiers tell the
Reflector what is still unreflected and the Dropper's ranking what is safest to retire.

Models cite memories by the 12-character display ids they are shown, sometimes by full ids, sometimes with
the brackets they saw around them. :class:`IdResolver` maps any of these to one full id of the active
set, or says why it cannot (unknown, ambiguous, a reflection, not an id).
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import apsw

from obsmem.ids import canonical_json
from obsmem.pipeline.tokens import token_cost

TIERS: tuple[str, ...] = ("not covered", "partly covered", "strongly covered")
IMPORTANCE_RANK = {"low": 0, "medium": 1, "high": 2, "critical": 3}
_HEX_ID = re.compile(r"[0-9a-f]{12,64}")


def one(conn: apsw.Connection, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...]:
    """The single row of an aggregate query (which always has one)."""
    row = conn.execute(sql, params).fetchone()
    if row is None:
        raise LookupError("an aggregate query returned no row")
    return tuple(row)


def tier_of(citations: int) -> str:
    """Coverage tier of an observation cited by ``citations`` reflections."""
    return TIERS[min(citations, 2)]


class PoolObservation(NamedTuple):
    row: int
    memory_id: str
    timestamp: str  # "YYYY-MM-DD HH:MM"
    importance: str
    content: str
    tokens: float
    citations: int  # reflections citing it

    @property
    def tier(self) -> str:
        return tier_of(self.citations)


class PoolReflection(NamedTuple):
    row: int
    memory_id: str
    timestamp: str
    content: str
    tokens: float


@dataclass(frozen=True)
class Pool:
    """A consistent snapshot of one session's active memory."""

    session_id: str
    observations: tuple[PoolObservation, ...]  # time order
    reflections: tuple[PoolReflection, ...]  # time order
    generation_row: int | None  # the active generation (None: none promoted yet)
    generation_number: int  # 0 before the first promotion

    @property
    def observation_tokens(self) -> int:
        return round(sum(o.tokens for o in self.observations))

    @property
    def reflection_tokens(self) -> int:
        return round(sum(r.tokens for r in self.reflections))

    def generation_id(self) -> str:
        return generation_id(self.session_id, (o.memory_id for o in self.observations))

    def by_id(self) -> dict[str, PoolObservation]:
        return {o.memory_id: o for o in self.observations}


def generation_id(session_id: str, observation_ids: Iterable[str]) -> str:
    """The id a Reflector run is claimed under: the session and the active observation set it starts from.

    Two runs over the same active observations (a duplicate job, a retry) get the same id and meet on one
    generation row; a set that was already reflected on is not reflected on again until it changes.
    """
    document = {"kind": "generation", "session_id": session_id, "observations": sorted(observation_ids)}
    return hashlib.sha256(canonical_json(document)).hexdigest()


_ACTIVE_OBSERVATIONS = (
    "SELECT m.id, m.memory_id, substr(m.date, 1, 16), m.importance, m.content FROM memories AS m"
    " WHERE m.session_id = ? AND m.kind = 'observation'"
    " AND NOT EXISTS (SELECT 1 FROM dropped_observations AS d WHERE d.observation_row = m.id)"
    " ORDER BY m.date, m.id"
)


def citation_counts(conn: apsw.Connection, session_id: str) -> dict[int, int]:
    """Observation row -> how many reflections cite it, for the observations of the session."""
    rows: list[tuple[int, int]] = conn.execute(  # type: ignore[assignment]
        "SELECT s.observation_row, count(*) FROM memories AS o"
        " JOIN reflection_supports AS s ON s.observation_row = o.id"
        " WHERE o.session_id = ? AND o.kind = 'observation' GROUP BY s.observation_row",
        (session_id,),
    ).fetchall()
    return dict(rows)


def active_pointer(conn: apsw.Connection, session_id: str) -> tuple[int | None, int]:
    """``(generation row, number)`` of the session's active generation; ``(None, 0)`` before the first."""
    row = conn.execute(
        "SELECT generation_row, number FROM active_generation WHERE session_id = ?", (session_id,)
    ).fetchone()
    return (None, 0) if row is None else (int(row[0]), int(row[1]))


def read_pool(conn: apsw.Connection, session_id: str) -> Pool:
    """The session's active memory with coverage; call inside a read snapshot for consistency."""
    cited = citation_counts(conn, session_id)
    observations = tuple(
        PoolObservation(row, memory_id, stamp, importance, content, token_cost(content), cited.get(row, 0))
        for row, memory_id, stamp, importance, content in conn.execute(_ACTIVE_OBSERVATIONS, (session_id,))
    )
    reflections = tuple(
        PoolReflection(row, memory_id, stamp, content, token_cost(content))
        for row, memory_id, stamp, content in conn.execute(
            "SELECT id, memory_id, substr(date, 1, 16), content FROM memories"
            " WHERE session_id = ? AND kind = 'reflection' ORDER BY date, id",
            (session_id,),
        )
    )
    generation_row, number = active_pointer(conn, session_id)
    return Pool(session_id, observations, reflections, generation_row, number)


class Resolved(NamedTuple):
    memory_id: str | None  # the full id, or None
    problem: str | None  # why not, phrased for the model


class IdResolver:
    """Maps ids as models write them to full ids of a set of active observations."""

    def __init__(self, observation_ids: Iterable[str], reflection_ids: Iterable[str] = ()) -> None:
        self._ids = sorted(set(observation_ids))
        self._reflections = sorted(set(reflection_ids))

    @staticmethod
    def _matches(ordered: Sequence[str], prefix: str, limit: int = 2) -> list[str]:
        start = bisect.bisect_left(ordered, prefix)
        found: list[str] = []
        for memory_id in ordered[start : start + limit]:
            if memory_id.startswith(prefix):
                found.append(memory_id)
        return found

    def resolve(self, raw: object) -> Resolved:
        if not isinstance(raw, str):
            return Resolved(None, "ids must be strings, the 12-character ids shown in brackets")
        candidate = raw.strip().strip("[]()#").strip().lower()
        if not _HEX_ID.fullmatch(candidate):
            shown = raw if len(raw) <= 80 else raw[:77] + "..."
            return Resolved(None, f"{shown!r} is not a memory id: use the 12-character id shown in brackets")
        found = self._matches(self._ids, candidate)
        if len(found) == 1:
            return Resolved(found[0], None)
        if len(found) > 1:
            return Resolved(None, f"{candidate[:12]} matches more than one observation: give its full 64-character id")
        if self._matches(self._reflections, candidate):
            return Resolved(None, f"{candidate[:12]} is a reflection: cite observations only")
        return Resolved(None, f"{candidate[:12]} is not an observation in the active memory shown")
