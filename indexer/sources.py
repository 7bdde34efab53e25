"""The two kinds of source the index holds, and how an event is read as one.

Memories (observations and reflections) are indexed under their row id; conversation events under their
negated row id (``-events.id``): the triggers of migration 6 mark them so in ``semantic_pending``, and
``semantic_sources``, ``semantic_chunks`` and ``semantic_context`` carry the same signed row. One marker
table and one chunk table thus serve both kinds without a collision, and a row's sign tells its kind.

An event is indexed as its content, then its tool name and its arguments (canonical JSON), each on a
line of its own when present, so a tool call's words are found in its arguments. Its date is its time
in the memories' stored format.
"""

from __future__ import annotations

# Every event, as a pending marker (a rebuild queues them all again).
ALL_EVENT_ROWS = "SELECT -id FROM events WHERE true ON CONFLICT(memory_row) DO UPDATE SET change = change + 1"


def is_event_row(row: int) -> bool:
    return row < 0


def event_text(alias: str) -> str:
    """SQL for the text event ``alias`` is indexed as."""
    return (
        f"{alias}.content || coalesce(char(10) || {alias}.tool_name, '') || coalesce(char(10) || {alias}.tool_args, '')"
    )


def event_date(alias: str) -> str:
    """SQL for event ``alias``'s time in the stored format: ``2024-05-01T09:30:12.345Z`` -> ``2024-05-01 09:30:12``."""
    return f"replace(substr({alias}.created_at, 1, 19), 'T', ' ')"
