"""Conversation events in the semantic index on PostgreSQL: their markers, their pending rows, their counts.

As on SQLite (:mod:`obsmem.indexer.sources`), an event is indexed under its negated row (``-events.id``) in
the same marker, source and chunk tables as memories, as its content, tool name and arguments, dated by its
time; an append writes no marker, and with ``semantic.index.events`` on the indexer marks the events above
the durable watermark ``event_marker_progress.marked_through`` (``p0010_event_markers``) before each batch.

Safe with any number of servers and workers on the database: :func:`mark_new_events` runs in a write
transaction, which holds the project's writer lock, and every write of events (appends, imports, restores)
holds it too. So while the marker reads the largest event id, no other transaction holds an uncommitted
event, and every event written later gets a larger id (an identity column never goes back) or, with an
explicit id at or below the watermark, is marked by the insert trigger in its own transaction.

The statements here are PostgreSQL's where SQLite's differ (a boolean ``CASE``, ``= ANY`` for lists, one
round trip for the marking); the text and date an event is indexed as are the shared SQL of ``sources``.
"""

from __future__ import annotations

from typing import Any

from obsmem.indexer import stores
from obsmem.indexer.sources import UNMARKED_EVENT_COUNT, UNMARKED_EVENTS
from obsmem.indexer.vectors import EVENTS, MEMORIES

# Whether an event waits above the watermark, not marked yet (an expression to combine with others).
EVENTS_UNMARKED = "EXISTS (SELECT 1 FROM events WHERE id > (SELECT marked_through FROM event_marker_progress))"

# Mark every event above the watermark and move the watermark to the last one, in one round trip; returns
# the rows marked. ``RETURNING`` of an upsert gives inserted and updated rows alike, so the last event marked
# is the smallest negated row returned.
_MARK_NEW_EVENTS = """
WITH marked AS (
    INSERT INTO semantic_pending(memory_row)
        SELECT -e.id FROM events AS e WHERE e.id > (SELECT marked_through FROM event_marker_progress)
        ON CONFLICT(memory_row) DO UPDATE SET change = semantic_pending.change + 1
        RETURNING memory_row
),
moved AS (
    UPDATE event_marker_progress SET marked_through = greatest(marked_through, (SELECT -min(memory_row) FROM marked))
    WHERE EXISTS (SELECT 1 FROM marked) RETURNING 1
)
SELECT count(*) FROM marked
"""


# Indexed events that still exist as indexed (SQLite's ``stores._INDEXED_COUNTS['events']``): an event up to
# the watermark that is not pending is the one indexed; any other has its derived id compared.
INDEXED_EVENTS = (
    "SELECT count(*) FROM semantic_sources AS s JOIN events AS e ON e.id = -s.memory_row"
    " WHERE s.memory_row < 0 AND s.chunk_count > 0"
    " AND CASE WHEN e.id <= (SELECT marked_through FROM event_marker_progress)"
    " AND NOT EXISTS (SELECT 1 FROM semantic_pending AS p WHERE p.memory_row = s.memory_row) THEN true"
    " ELSE obsmem_event_id(e.session_id, e.seq) = s.memory_id END"
)


def mark_new_events(conn: Any) -> int:
    """Mark every event above the watermark pending and move the watermark past them (in the caller's write
    transaction, which holds the project's writer lock); returns how many were marked."""
    return int(conn.execute(_MARK_NEW_EVENTS).fetchone()[0])


def has_unmarked_events(conn: Any) -> bool:
    return bool(conn.execute(UNMARKED_EVENTS).fetchone()[0])


def pending_count(conn: Any, *, events: bool) -> int:
    """Sources waiting for a batch: memory markers, and with events indexed their markers and the events not
    marked yet (event markers wait, unread, while events are not indexed)."""
    if not events:
        return int(conn.execute("SELECT count(*) FROM semantic_pending WHERE memory_row > 0").fetchone()[0])
    row = conn.execute(f"SELECT (SELECT count(*) FROM semantic_pending) + ({UNMARKED_EVENT_COUNT})").fetchone()
    return int(row[0])


def kind_condition(kind: str | None, alias: str = "c") -> str | None:
    """The SQL condition keeping the chunks (or markers) ``alias`` of one kind of source (None: both)."""
    if kind is None:
        return None
    return f"{alias}.memory_row < 0" if kind == EVENTS else f"{alias}.memory_row > 0"


def indexed_count(conn: Any, kind: str | None) -> int:
    """Current memories and events represented by an indexed chunk (``kind``: one kind alone)."""
    total = 0
    if kind in (None, MEMORIES):
        total += stores.indexed_count(conn, MEMORIES)
    if kind in (None, EVENTS):
        total += int(conn.execute(INDEXED_EVENTS).fetchone()[0])
    return total
