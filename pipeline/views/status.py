"""The status view: what the pipeline is doing for a session, for `obsmem status` and agents' progress bars.

It reads the observer's progress counters (backlog and watermark), the activity row the jobs write
(:mod:`obsmem.pipeline.activity`), the newest failure, the session's jobs, the active generation and the
pool's pressure. Read-only and cheap enough for a live view.
"""

from __future__ import annotations

import time
from typing import Any

import apsw

from obsmem.errors import NotFound
from obsmem.pipeline.observe.coverage import Progress, read_progress
from obsmem.pipeline.reflect.generations import active_generation_info
from obsmem.pipeline.session_jobs import session_order_key
from obsmem.pipeline.views.details import pool_pressure
from obsmem.settings import Settings
from obsmem.work import JobQueue, eventlog

STAGE_STATUS = {"observer": "observing", "reflector": "reflecting", "dropper": "reflecting"}


FAILURE_TYPES = ("om_observation_failed", "om_reflection_failed", "om_dropper_failed", "job_failed")
SUCCESS_TYPES = ("om_observation_end", "om_reflection_end", "om_dropper_end")


def _last_error(conn: apsw.Connection, session_id: str) -> dict[str, Any] | None:
    """The newest failure for the session, unless a cycle has succeeded since."""
    failure = eventlog.latest_session_event(conn, session_id, FAILURE_TYPES)
    if failure is None:
        return None
    if eventlog.has_session_event_after(conn, session_id, failure.id, SUCCESS_TYPES):
        return None
    reason = failure.data.get("error") or failure.data.get("reason") or ""
    code, _, message = reason.partition(": ")
    return {"type": failure.type, "code": code, "message": message or reason, "at": failure.created_at}


def session_status(
    conn: apsw.Connection,
    queue: JobQueue,
    settings: Settings,
    session_id: str,
    *,
    observer_state: str,
    reflector_state: str = "not_configured",
) -> dict[str, Any]:
    """The status of one session (see docs/pipeline.md for every field).

    ``queue`` reads the session's job counts inside ``conn``'s snapshot, so one status is one moment.
    """
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
    jobs = queue.state_counts(session_order_key(session_id), conn=conn)
    threshold = settings.observer.buffer_tokens
    pool = pool_pressure(conn, settings, session_id)
    generation = active_generation_info(conn, session_id)
    stage = activity["stage"] if activity else None
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
        "jobs": {"queued": jobs["queued"], "running": jobs["running"]},
        "buffered": _buffered(progress, pool, generation, stage, settings.reflector.reflect_after_observation_tokens),
        "step_number": progress.cycles,
        "pre_reflection_tokens": _pre_reflection_tokens(pool, generation),
    }


def _buffered(
    progress: Progress,
    pool: dict[str, Any],
    generation: dict[str, Any] | None,
    stage: str | None,
    reflection_threshold: int,
) -> dict[str, Any]:
    """Mastra's ``buffered`` progress in obsmem's terms: all observation runs in the background (Mastra's
    buffering), and what it produced waits for the agent's next compaction (Mastra's activation)."""
    observing = "pending" if progress.pending_tokens else "idle"
    if stage == "observer":
        observing = "running"
    reflecting = "due" if pool["observation_tokens"] > reflection_threshold else "idle"
    if stage in ("reflector", "dropper"):
        reflecting = "running"
    return {
        "observations": {
            "status": observing,
            "chunks": progress.cycles,
            "message_tokens": progress.observed_tokens,
            "projected_message_removal": progress.observed_through_seq,
            "observation_tokens": pool["observation_tokens"],
        },
        "reflection": {
            "status": reflecting,
            "input_observation_tokens": generation["observation_tokens_before"] if generation else 0,
            "observation_tokens": (generation["observation_tokens_after"] or 0) if generation else 0,
        },
    }


def _pre_reflection_tokens(pool: dict[str, Any], generation: dict[str, Any] | None) -> int:
    """Active observation tokens before the newest reflection (the current ones when none ran yet)."""
    return int(generation["observation_tokens_before"]) if generation else int(pool["observation_tokens"])
