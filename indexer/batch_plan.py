"""What one indexing batch takes and which stored embeddings it keeps, the same on SQLite and PostgreSQL.

A batch reads pending sources in indexing order (memories by row, then, where events are indexed, events by
their negated row descending, so both go oldest first), chunks each one's current text and stops before its
chunk budget would be exceeded; it always takes the first source, so a memory longer than the budget is
still indexed. Chunks whose key (and so whose text) already has an embedding keep it: re-chunking unchanged
text costs no model call.

Each backend supplies only its SQL: the pending queries (:class:`PendingQueries`) and the lookup of stored
embeddings; the order, the budget and the shapes below are decided here once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from obsmem.indexer.chunker import Chunk, ChunkSettings, chunk_text

# A pending row as the queries return it: memory_row, change, then the source's id, text, date and
# session (all four None when the source is gone).
PendingRow = Sequence[Any]


@dataclass(frozen=True)
class PendingQueries:
    """A backend's queries for pending sources, each returning :data:`PendingRow` columns in indexing order.

    ``memories`` takes (after_row, limit): memory rows above ``after_row``, ascending. ``events`` takes
    (below_row, limit): event rows (negative) below ``below_row``, descending; None where events are not
    indexed.
    """

    memories: str
    events: str | None = None


@dataclass
class PlannedSource:
    memory_row: int
    change: int
    memory: tuple[str, str, str, str] | None  # memory_id, content, date, session_id; None if deleted
    chunks: list[Chunk] = field(default_factory=list)


@dataclass
class EmbeddedBatch:
    plan: list[PlannedSource]
    reused: dict[str, bytes]  # chunk key -> stored embedding (float32 bytes)
    fresh: dict[str, np.ndarray] = field(default_factory=dict)  # chunk key -> new embedding
    width: int | None = None  # dimensions of the new embeddings


def read_pending(conn: Any, queries: PendingQueries, budget: int, after_row: int | None) -> list[PendingRow]:
    """Up to ``budget`` pending rows after ``after_row`` (None: from the start) in indexing order.

    The budget counts chunks, and every source has at least one chunk unless it is gone, so more rows than
    that are never needed. Memories come first, so a position among the events (a negative row) means the
    memories are done.
    """
    rows: list[PendingRow] = []
    if after_row is None or after_row > 0:
        rows = list(conn.execute(queries.memories, (after_row or 0, budget)).fetchall())
    if queries.events is not None and len(rows) < budget:
        below = 0 if after_row is None or after_row > 0 else after_row
        rows += conn.execute(queries.events, (below, budget - len(rows))).fetchall()
    return rows


def plan_batch(rows: Sequence[PendingRow], budget: int, chunking: ChunkSettings) -> list[PlannedSource]:
    """The pending rows chunked, in order, up to ``budget`` chunks (at least the first row, whatever its size)."""
    plan: list[PlannedSource] = []
    chunk_total = 0
    for memory_row, change, memory_id, content, date, session_id in rows:
        item = PlannedSource(int(memory_row), int(change), None)
        if memory_id is not None:
            item.memory = (memory_id, content, date, session_id)
            item.chunks = chunk_text(memory_id, content, chunking)
        if plan and chunk_total + len(item.chunks) > budget:
            break
        plan.append(item)
        chunk_total += len(item.chunks)
    return plan


def keep_stored_embeddings(plan: list[PlannedSource], stored: Callable[[list[str]], dict[str, bytes]]) -> EmbeddedBatch:
    """The plan with the embeddings ``stored`` finds for its chunk keys (asked only when there are chunks)."""
    keys = [chunk.key for item in plan for chunk in item.chunks]
    return EmbeddedBatch(plan, stored(keys) if keys else {})
