"""The pipeline's job kinds and the keys that order and deduplicate its jobs.

Observe and reflect jobs of one session share one order key, so a session is observed or reflected on,
one at a time, never both at once. Dedupe keys fold repeated requests into one queued job. Housekeeping
asks when a session's last job of a kind gave up.
"""

from __future__ import annotations

from datetime import UTC, datetime

import apsw

from obsmem.work import eventlog

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


def seconds_since_failure(conn: apsw.Connection, session_id: str, kind: str) -> float | None:
    """Age of the session's newest job of this kind that gave up (its ``job_failed`` event); None if none."""
    failed_at = eventlog.last_failure_at(conn, session_id, kind)
    if failed_at is None:
        return None
    stamp = datetime.fromisoformat(failed_at.replace("Z", "+00:00"))
    return (datetime.now(UTC) - stamp).total_seconds()
