"""Activity writes: the running stage of a session and the stage events, as the jobs record them.

``current_activity`` holds at most one row per session while a model stage runs. It is written with the
stage's start event and removed in the transaction that commits the stage's results, or with its failure
event (guarded by job id, so a late cleanup never removes a newer job's row); rows left by a crashed
worker are hidden once older than ``stale_activity_seconds`` and deleted by housekeeping. Writing it is
best effort: a failed write here never fails model work. The status view
(:mod:`obsmem.pipeline.views.status`) reads what this module writes.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import apsw

from obsmem.storage import ProjectDatabase
from obsmem.work import eventlog

log = logging.getLogger("obsmem.pipeline.activity")


def set_activity(conn: apsw.Connection, session_id: str, job_id: int, stage: str, tokens: int) -> None:
    """Record the running stage, inside the caller's write transaction."""
    now = time.time()
    conn.execute(
        "INSERT INTO current_activity(session_id, job_id, stage, tokens, started_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(session_id) DO UPDATE SET job_id = excluded.job_id,"
        " stage = excluded.stage, tokens = excluded.tokens, started_at = excluded.started_at,"
        " updated_at = excluded.updated_at",
        (session_id, job_id, stage, tokens, now, now),
    )


def clear_activity(conn: apsw.Connection, session_id: str, job_id: int) -> None:
    """Remove the job's activity row (never a newer job's), inside the caller's write transaction."""
    conn.execute("DELETE FROM current_activity WHERE session_id = ? AND job_id = ?", (session_id, job_id))


def clear_stale_activity(db: ProjectDatabase, stale_seconds: float) -> int:
    with db.write() as conn:
        conn.execute("DELETE FROM current_activity WHERE updated_at < ?", (time.time() - stale_seconds,))
        return conn.changes()


def log_stage_event(
    db: ProjectDatabase,
    type_: str,
    session_id: str,
    cycle_id: str,
    job_id: int,
    data: dict[str, Any],
    *,
    activity: tuple[str, int] | None = None,
    clear: bool = False,
) -> None:
    """Log an event and set or clear the activity row, in one transaction; never fails the work."""
    try:
        with db.write() as conn:
            eventlog.record(conn, type_, session_id=session_id, cycle_id=cycle_id, job_id=job_id, data=data)
            if activity is not None:
                set_activity(conn, session_id, job_id, *activity)
            if clear:
                clear_activity(conn, session_id, job_id)
    except Exception as exc:  # noqa: BLE001 - status and the event log never fail model work
        log.warning("could not record %s: %s", type_, type(exc).__name__)
