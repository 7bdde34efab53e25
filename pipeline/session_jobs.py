"""The pipeline's job kinds and the keys that order and deduplicate its jobs.

Observe and reflect jobs of one session share one order key, so a session is observed or reflected on,
one at a time, never both at once. Dedupe keys fold repeated requests into one queued job. Housekeeping
asks what is queued and when a session's last job of a kind gave up.
"""

from __future__ import annotations

from datetime import UTC, datetime

import apsw

OBSERVE = "observe"
REFLECT = "reflect"


def session_order_key(session_id: str) -> str:
    """Jobs of one session share this order key, so they run one at a time, in order."""
    return f"session:{session_id}"


def observe_dedupe_key(session_id: str) -> str:
    """At most one queued observe job per session (appends while one is queued add nothing)."""
    return f"observe:{session_id}"


def forced_observe_dedupe_key(session_id: str) -> str:
    """An explicit request (or a continuation) to observe the whole backlog, below the buffer too."""
    return observe_dedupe_key(session_id) + ":forced"


def reflect_dedupe_key(generation_id: str) -> str:
    """One reflect job per active observation set (the generation id names the set)."""
    return f"reflect:{generation_id}"


def forced_reflect_dedupe_key(session_id: str) -> str:
    """An explicit request to reflect now, below the threshold too."""
    return f"reflect:{session_id}:forced"


def has_queued(conn: apsw.Connection, session_id: str, kind: str) -> bool:
    """Whether a job of this kind waits in the session's queue."""
    row = conn.execute(
        "SELECT 1 FROM jobs WHERE order_key = ? AND kind = ? AND state = 'queued' LIMIT 1",
        (session_order_key(session_id), kind),
    ).fetchone()
    return row is not None


def seconds_since_failure(conn: apsw.Connection, session_id: str, kind: str) -> float | None:
    """Age of the session's newest job of this kind that gave up (its ``job_failed`` event); None if none."""
    failed = conn.execute(
        "SELECT created_at FROM om_events WHERE session_id = ? AND type = 'job_failed'"
        " AND json_extract(data, '$.kind') = ? ORDER BY id DESC LIMIT 1",
        (session_id, kind),
    ).fetchone()
    if failed is None:
        return None
    stamp = datetime.fromisoformat(failed[0].replace("Z", "+00:00"))
    return (datetime.now(UTC) - stamp).total_seconds()
