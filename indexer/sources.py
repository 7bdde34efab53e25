"""The two kinds of source the index holds, and how an event is read as one.

Memories (observations and reflections) are indexed under their row id; conversation events under their
negated row id (``-events.id``), so marked in ``semantic_pending`` (new events by :func:`mark_new_events`,
edits and deletes by the triggers of migration 6), and ``semantic_sources``, ``semantic_chunks`` and
``semantic_context`` carry the same signed row. One marker table and one chunk table thus serve both kinds
without a collision, and a row's sign tells its kind.

An event is indexed as its content, then its tool name and its arguments (canonical JSON), each on a
line of its own when present, so a tool call's words are found in its arguments. Its date is its time
in the memories' stored format.
"""

from __future__ import annotations

import apsw

# A rebuild queues every event again by moving the marker watermark back to the start (mark_new_events
# marks them, only when events are indexed), not by marking each one.
MARK_ALL_EVENTS_AGAIN = "UPDATE event_marker_progress SET marked_through = 0"


# Are there events above the marker watermark (new events the indexer has not marked yet)?
UNMARKED_EVENTS = "SELECT EXISTS (SELECT 1 FROM events WHERE id > (SELECT marked_through FROM event_marker_progress))"
UNMARKED_EVENT_COUNT = "SELECT count(*) FROM events WHERE id > (SELECT marked_through FROM event_marker_progress)"


def mark_new_events(conn: apsw.Connection) -> int:
    """Mark every event above the watermark pending and move the watermark to the last one (in the caller's
    write transaction); returns how many were marked.

    Appends write no marker of their own (migration 6): when events are indexed, this runs before each
    batch, so a new event waits at most one batch longer than a trigger's marker would have made it."""
    through = conn.execute("SELECT marked_through FROM event_marker_progress").fetchone()[0]
    last, count = conn.execute("SELECT max(id), count(*) FROM events WHERE id > ?", (through,)).fetchone()
    if last is None:
        return 0
    conn.execute(
        "INSERT INTO semantic_pending(memory_row) SELECT -id FROM events WHERE id > ? AND id <= ?"
        " ON CONFLICT(memory_row) DO UPDATE SET change = change + 1",
        (through, last),
    )
    conn.execute("UPDATE event_marker_progress SET marked_through = ?", (last,))
    return int(count)


def is_event_row(row: int) -> bool:
    return row < 0


def event_text(alias: str) -> str:
    """SQL for the text event ``alias`` is indexed as. The line break is a quoted newline, which SQLite and
    PostgreSQL both read (they share no function that makes one: ``char(10)`` against ``chr(10)``)."""
    return f"{alias}.content || coalesce('\n' || {alias}.tool_name, '') || coalesce('\n' || {alias}.tool_args, '')"


def event_date(alias: str) -> str:
    """SQL for event ``alias``'s time in the stored format: ``2024-05-01T09:30:12.345Z`` -> ``2024-05-01 09:30:12``."""
    return f"replace(substr({alias}.created_at, 1, 19), 'T', ' ')"


# Pending sources with what indexing needs: the id, the text, the date and the session of the memory
# (positive row) or event (negative row) as it is now; NULLs when it is gone. Memories come in row order,
# then events in row order (their negated rows descending), so both are indexed oldest first and their
# labels follow the order they were written in. The same SQL on both backends (PostgreSQL's schema
# defines obsmem_event_id as SQLite's connection does).
_PENDING_COLUMNS = (
    "SELECT p.memory_row, p.change, coalesce(m.memory_id, obsmem_event_id(e.session_id, e.seq)),"
    f" CASE WHEN p.memory_row > 0 THEN m.content ELSE {event_text('e')} END,"
    f" coalesce(m.date, {event_date('e')}), coalesce(m.session_id, e.session_id)"
    " FROM semantic_pending AS p LEFT JOIN memories AS m ON p.memory_row > 0 AND m.id = p.memory_row"
    " LEFT JOIN events AS e ON p.memory_row < 0 AND e.id = -p.memory_row"
)
PENDING_MEMORIES = _PENDING_COLUMNS + " WHERE p.memory_row > ? ORDER BY p.memory_row LIMIT ?"
PENDING_EVENTS = _PENDING_COLUMNS + " WHERE p.memory_row < ? ORDER BY p.memory_row DESC LIMIT ?"
