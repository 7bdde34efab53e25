"""Progress state: what the pipeline is doing for a session, for status views and agents' progress bars.

``current_activity`` holds at most one row per session while a model stage runs. It is written with the
stage's start event and removed in the transaction that commits the stage's results, or with its failure
event (guarded by job id, so a late cleanup never removes a newer job's row); rows left by a crashed
worker are hidden once older than ``stale_activity_seconds`` and deleted by housekeeping. Writing it is
best effort: a failed status write never fails model work.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import apsw
from obsmem.pipeline.observe.coverage import read_progress
from obsmem.pipeline.reflect.generations import active_generation_info
from obsmem.pipeline.views.memory_view import pool_pressure

from obsmem import eventlog
from obsmem.errors import NotFound
from obsmem.settings import Settings
from obsmem.storage.connection import ProjectDatabase

log = logging.getLogger("obsmem.pipeline.progress")

STAGE_STATUS = {"observer": "observing", "reflector": "reflecting", "dropper": "reflecting"}


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


def _last_error(conn: apsw.Connection, session_id: str) -> dict[str, Any] | None:
    """The newest failure for the session, unless a cycle has succeeded since."""
    row = conn.execute(
        "SELECT id, type, created_at, data FROM om_events WHERE session_id = ?"
        " AND type IN ('om_observation_failed', 'om_reflection_failed', 'om_dropper_failed', 'job_failed')"
        " ORDER BY id DESC LIMIT 1",
        (session_id,),
    ).fetchone()
    if row is None:
        return None
    success = conn.execute(
        "SELECT 1 FROM om_events WHERE session_id = ? AND id > ?"
        " AND type IN ('om_observation_end', 'om_reflection_end', 'om_dropper_end') LIMIT 1",
        (session_id, row[0]),
    ).fetchone()
    if success is not None:
        return None
    import json

    data = json.loads(row[3])
    reason = data.get("error") or data.get("reason") or ""
    code, _, message = reason.partition(": ")
    return {"type": row[1], "code": code, "message": message or reason, "at": row[2]}


def session_status(
    conn: apsw.Connection,
    settings: Settings,
    session_id: str,
    *,
    observer_state: str,
    reflector_state: str = "not_configured",
) -> dict[str, Any]:
    """The progress state of one session (see docs/pipeline.md for every field)."""
    session = conn.execute("SELECT last_seq FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
    if session is None:
        raise NotFound(f"session '{session_id}' has no events", code="session_not_found", field="session_id")
    progress = read_progress(conn, session_id)
    activity_row = conn.execute(
        "SELECT stage, tokens, started_at, updated_at, job_id FROM current_activity WHERE session_id = ?",
        (session_id,),
    ).fetchone()
    activity = None
    if activity_row is not None and activity_row[3] >= time.time() - settings.jobs.stale_activity_seconds:
        activity = {
            "stage": activity_row[0],
            "tokens": activity_row[1],
            "running_seconds": round(max(0.0, time.time() - activity_row[2]), 1),
            "job_id": activity_row[4],
        }
    jobs = dict(
        conn.execute(
            "SELECT state, count(*) FROM jobs WHERE order_key = ? AND state IN ('queued', 'running') GROUP BY state",
            (session_order_key(session_id),),
        ).fetchall()
    )
    threshold = settings.observer.buffer_tokens
    pool = pool_pressure(conn, settings, session_id)
    generation = active_generation_info(conn, session_id)
    return {
        "session_id": session_id,
        "status": STAGE_STATUS.get(activity["stage"], "observing") if activity else "idle",
        "pending_tokens": progress.pending_tokens,
        "threshold": threshold,
        "threshold_percent": round(100.0 * progress.pending_tokens / threshold, 1),
        "observation_threshold": settings.observer.observation_threshold,
        "observation_tokens": pool["observation_tokens"],
        "reflection_threshold": settings.reflector.reflect_after_observation_tokens,
        "generation_count": generation["number"] if generation else 0,
        "current_activity": activity,
        "last_error": _last_error(conn, session_id),
        "pending_events": progress.pending_events,
        "observed_through_seq": progress.observed_through_seq,
        "last_seq": session[0],
        "observer": observer_state,
        "reflector": reflector_state,
        "generation": generation,
        "pool": pool,
        "jobs": {"queued": jobs.get("queued", 0), "running": jobs.get("running", 0)},
    }


def session_order_key(session_id: str) -> str:
    """Jobs of one session share this order key, so they run one at a time, in order."""
    return f"session:{session_id}"


def status_write(
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
