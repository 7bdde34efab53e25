"""The observation pipeline as one object: the append trigger, the observe job, housekeeping, reads.

Flow::

    append_events (any surface)
      -> append hook, inside the append's transaction: backlog += event tokens;
         backlog >= observer.buffer_tokens -> queue an "observe" job (deduplicated per session)
    worker (in `obsmem serve` or `obsmem worker`) claims the job
      -> pack the next chunk of uncovered events (+ existing memory for context)
      -> Observer cycle with the model (record_observations, receipts, bounded rounds)
      -> one fenced transaction: observations + coverage rows + progress + om_observation_end
      -> repeat until the backlog is empty (or max_chunks_per_job, then a continuation job)

The append path never calls a model and never waits for one: it adds a few rows to its own transaction.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import apsw
import httpx
from obsmem.pipeline.activity import clear_activity, clear_stale_activity, log_stage_event
from obsmem.pipeline.clients import ModelClients
from obsmem.pipeline.llm import ChatClient
from obsmem.pipeline.memory_items import MemoryItem, active_memory, active_observation_tokens, memory_exists
from obsmem.pipeline.model_overrides import Override, apply_changes, effective_models, parse_changes, read_overrides
from obsmem.pipeline.observe.coverage import commit_chunk, pending_events, read_progress
from obsmem.pipeline.observe.hygiene import DEFAULT_MEMORY_TOOLS, DEFAULT_OMIT_TAGS, render_event
from obsmem.pipeline.observe.observer import run_cycle
from obsmem.pipeline.observe.packer import Budget, EventChunk, pack_chunk, select_memory
from obsmem.pipeline.observe.prompts import prompt_overhead_tokens
from obsmem.pipeline.reflect.job import ReflectJob
from obsmem.pipeline.session_jobs import (
    OBSERVE,
    REFLECT,
    forced_observe_dedupe_key,
    observe_dedupe_key,
    session_order_key,
)
from obsmem.pipeline.tokens import event_tokens, sql_estimate
from obsmem.pipeline.views.details import memory_details
from obsmem.pipeline.views.projection import Projection, project
from obsmem.pipeline.views.status import session_status

from obsmem import eventlog
from obsmem.errors import ConfigurationError, ObservationOff
from obsmem.events import StoredEvent
from obsmem.jobs import EnqueueResult, JobQueue, sanitise_reason
from obsmem.settings import Settings
from obsmem.storage.connection import ProjectDatabase
from obsmem.workers import JobContext

log = logging.getLogger("obsmem.pipeline")


class AppendHook:
    """The ``after_insert`` hook of one append; ``queued`` says whether it queued an observe job."""

    __slots__ = ("pipeline", "queue", "queued")

    def __init__(self, pipeline: ObservationPipeline, queue: JobQueue) -> None:
        self.pipeline = pipeline
        self.queue = queue
        self.queued = False

    def __call__(self, conn: apsw.Connection, session_id: str, events: list[StoredEvent]) -> None:
        self.queued = self.pipeline.after_insert(self.queue, conn, session_id, events) or self.queued


class ObservationPipeline:
    """Everything pipeline I adds to a data directory; the service facade delegates to it."""

    def __init__(self, settings: Settings, *, transport: httpx.BaseTransport | None = None) -> None:
        self.settings = settings
        self.clients = ModelClients(settings, transport=transport)
        self.reflect = ReflectJob(settings, self.clients)
        self.render = functools.partial(render_event, omit_tags=DEFAULT_OMIT_TAGS, memory_tools=DEFAULT_MEMORY_TOOLS)
        if self.observer_state == "enabled":
            self.budget()  # fail at start-up, not in the first job, if the numbers cannot work

    # -- configuration -------------------------------------------------------------------------

    @property
    def observer_state(self) -> str:
        """``enabled``, ``disabled`` (observer.enabled = false) or ``not_configured`` (no model)."""
        if not self.settings.observer.enabled:
            return "disabled"
        model = self.settings.model_for("observer")
        return "enabled" if model.base_url and model.model_id else "not_configured"

    @property
    def reflector_state(self) -> str:
        """``enabled``, ``disabled`` (reflector.enabled = false) or ``not_configured`` (no model)."""
        return self.reflect.state

    def budget(self, override: Override | None = None) -> Budget:
        observer = self.settings.observer
        try:
            return Budget.plan(
                self.clients.model("observer", override).context_window_tokens,
                observer.context_window_ratio,
                observer.memory_share,
                prompt_overhead_tokens(observer.max_observation_chars),
            )
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None

    def queue(self, db: ProjectDatabase) -> JobQueue:
        jobs = self.settings.jobs
        return JobQueue(
            db,
            lease_seconds=jobs.lease_seconds,
            retry_backoff_seconds=jobs.retry_backoff_seconds,
            max_attempts=jobs.max_retries + 1,
        )

    # -- the append trigger --------------------------------------------------------------------

    def append_hook(self, db: ProjectDatabase) -> AppendHook:
        """The hook ``append_events`` runs inside its transaction for ``db`` (one per append)."""
        return AppendHook(self, self.queue(db))

    def after_insert(self, queue: JobQueue, conn: apsw.Connection, session_id: str, events: list[StoredEvent]) -> bool:
        """Count the backlog; queue an observe job if it reached the buffer. Returns whether one was queued."""
        tokens = sum(event_tokens(e.role, e.type, e.content, e.tool_name, e.tool_args) for e in events)
        lowest = min(e.seq for e in events)
        row = conn.execute(
            "INSERT INTO observer_progress(session_id, pending_tokens, pending_events, scan_from_seq)"
            " VALUES (?, ?, ?, ?) ON CONFLICT(session_id) DO UPDATE SET"
            " pending_tokens = pending_tokens + excluded.pending_tokens,"
            " pending_events = pending_events + excluded.pending_events,"
            " scan_from_seq = min(scan_from_seq, excluded.scan_from_seq)"
            " RETURNING pending_tokens",
            (session_id, tokens, len(events), lowest),
        ).fetchone()
        if row[0] < self.settings.observer.buffer_tokens or not self._observer_enabled():
            return False
        dedupe_key = observe_dedupe_key(session_id)
        # Usually a job is already waiting: one indexed lookup, and the append is done.
        if conn.execute("SELECT 1 FROM jobs WHERE dedupe_key = ? AND state = 'queued'", (dedupe_key,)).fetchone():
            return False
        return queue.enqueue(
            OBSERVE,
            {"session_id": session_id},
            order_key=session_order_key(session_id),
            dedupe_key=dedupe_key,
            conn=conn,
        ).created

    def _observer_enabled(self) -> bool:
        """``observer_state == "enabled"`` without building the merged model settings (append path)."""
        observer, shared = self.settings.observer, self.settings.model
        return bool(
            observer.enabled
            and (observer.model.base_url or shared.base_url)
            and (observer.model.model_id or shared.model_id)
        )

    def request_observation(self, db: ProjectDatabase, session_id: str) -> EnqueueResult:
        """Observe the session's whole backlog now, below the buffer threshold too (e.g. at session end)."""
        state = self.observer_state
        if state != "enabled":
            reason = "observer.enabled is false" if state == "disabled" else "no [model] is configured"
            raise ObservationOff(f"this server does not observe sessions: {reason}")
        return self.queue(db).enqueue(
            OBSERVE,
            {"session_id": session_id, "force": True},
            order_key=session_order_key(session_id),
            dedupe_key=forced_observe_dedupe_key(session_id),
        )

    # -- the observe job -----------------------------------------------------------------------

    @property
    def handlers(self) -> dict[str, Callable[[JobContext], None]]:
        return {OBSERVE: self.observe_job, REFLECT: self.reflect.handle}

    def observe_job(self, ctx: JobContext) -> None:
        session_id = ctx.lease.payload.get("session_id")
        if not isinstance(session_id, str):
            raise ConfigurationError("observe job without a session_id")
        db = ctx.db
        backlog = read_progress(db.connection(), session_id).pending_tokens
        if self.observer_state == "disabled":
            return
        if not ctx.lease.payload.get("force") and backlog < self.settings.observer.buffer_tokens:
            # An earlier job observed the backlog already (and, seeing this job queued, left the decision
            # about reflection to it).
            self._reflect_if_due(ctx, session_id)
            return
        override = read_overrides(db.connection()).get("observer")
        client = self.clients.get("observer", override)
        budget = self.budget(override)
        for _ in range(self.settings.observer.max_chunks_per_job):
            ctx.raise_if_lost()
            with db.read() as conn:
                chunk = pack_chunk(
                    pending_events(conn, session_id, self.render, enough_tokens=budget.events), budget.events
                )
                if chunk is None:
                    break
                memory = select_memory(active_memory(conn, session_id), budget.memory)
            self._observe_chunk(ctx, client, session_id, chunk, memory)
        else:
            with db.read() as conn:
                more = pending_events(conn, session_id, self.render, enough_tokens=0)
            if more:
                ctx.queue.enqueue(
                    OBSERVE,
                    {"session_id": session_id, "force": True},
                    order_key=session_order_key(session_id),
                    dedupe_key=forced_observe_dedupe_key(session_id),
                )
                return  # observe work is still pending: the continuation decides about reflection
        self._reflect_if_due(ctx, session_id)

    def _reflect_if_due(self, ctx: JobContext, session_id: str) -> None:
        """All observe work of the session is durable: queue a reflect job if the threshold is passed.

        Best effort: if this fails (or the worker dies first), housekeeping finds the session later.
        """
        if _queued(ctx.db, OBSERVE, session_id):
            return  # more observation is queued; the last observe job decides
        try:
            self.reflect.queue_if_due(ctx.queue, ctx.db, session_id)
        except Exception as exc:  # noqa: BLE001 - observation succeeded; reflection is retried by housekeeping
            log.warning("could not queue reflection: %s", type(exc).__name__)

    def _observe_chunk(
        self, ctx: JobContext, client: ChatClient, session_id: str, chunk: EventChunk, memory: list[MemoryItem]
    ) -> None:
        # Two write transactions per cycle (start, and commit or failure): every write here makes an
        # append to the same project wait for the lock, so status rows ride along with the events.
        db, job_id = ctx.db, ctx.lease.job_id
        cycle_id = uuid.uuid4().hex
        started = time.monotonic()
        seqs = chunk.seqs
        start_event = {
            "operation": "observe",
            "tokens_to_observe": chunk.tokens,
            "events": len(set(seqs)),
            "first_seq": seqs[0],
            "last_seq": seqs[-1],
            "partial_event": any(not piece.whole for piece in chunk.pieces),
            "attempt": ctx.lease.attempt,
        }
        log_stage_event(
            db, "om_observation_start", session_id, cycle_id, job_id, start_event, activity=("observer", chunk.tokens)
        )
        try:
            conn = db.connection()
            tokens_before = active_observation_tokens(conn, session_id)
            result = run_cycle(
                client,
                session_id=session_id,
                chunk=chunk,
                memory=memory,
                exists=lambda memory_id: memory_exists(conn, memory_id),
                max_rounds=self.settings.observer.max_tool_rounds,
                max_chars=self.settings.observer.max_observation_chars,
            )
            ctx.raise_if_lost()
            with ctx.fenced_write() as write_conn:
                commit_chunk(
                    write_conn,
                    db,
                    session_id=session_id,
                    chunk=chunk,
                    observations=result.observations,
                    cycle_id=cycle_id,
                    job_id=job_id,
                    observation_tokens_before=tokens_before,
                    end_event={
                        "duration_ms": round((time.monotonic() - started) * 1000),
                        "tokens_observed": chunk.tokens,
                        "source_tokens": chunk.source_tokens,
                        "rounds": result.rounds,
                        "stop_reason": result.stop_reason,
                        "rejected": result.rejected,
                        "duplicates": result.duplicates,
                        "prompt_tokens": result.prompt_tokens,
                        "completion_tokens": result.completion_tokens,
                    },
                )
                clear_activity(write_conn, session_id, job_id)
        except BaseException as exc:
            failed = {
                "duration_ms": round((time.monotonic() - started) * 1000),
                "error": sanitise_reason(exc),
                "attempt": ctx.lease.attempt,
            }
            log_stage_event(db, "om_observation_failed", session_id, cycle_id, job_id, failed, clear=True)
            raise

    # -- housekeeping --------------------------------------------------------------------------

    @property
    def housekeeping_tasks(self) -> list[Callable[[str, ProjectDatabase], None]]:
        return [self.housekeep]

    def housekeep(self, project: str, db: ProjectDatabase) -> None:
        """Clear stale activity rows; queue observation for sessions left over the buffer, and reflection
        for sessions left over the reflection threshold."""
        clear_stale_activity(db, self.settings.jobs.stale_activity_seconds)
        if self.observer_state == "enabled":
            self._resume_observation(project, db)
        if self.reflector_state == "enabled":
            self._resume_reflection(project, db)

    def _resume_observation(self, project: str, db: ProjectDatabase) -> None:
        cool_down = self.settings.observer.resume_after_failure_seconds
        conn = db.connection()
        rows = conn.execute(
            "SELECT p.session_id FROM observer_progress AS p WHERE p.pending_tokens >= ?"
            " AND NOT EXISTS (SELECT 1 FROM jobs AS j WHERE j.order_key = 'session:' || p.session_id"
            "  AND j.kind = ? AND j.state IN ('queued', 'running'))",
            (self.settings.observer.buffer_tokens, OBSERVE),
        ).fetchall()
        for (session_id,) in rows:
            # Only a failed observe job cools the session down: a failing Reflector is no reason to
            # leave the backlog unobserved.
            failed = conn.execute(
                "SELECT created_at FROM om_events WHERE session_id = ? AND type = 'job_failed'"
                " AND json_extract(data, '$.kind') = ? ORDER BY id DESC LIMIT 1",
                (session_id, OBSERVE),
            ).fetchone()
            if failed is not None and _age_seconds(failed[0]) < cool_down:
                continue
            self.queue(db).enqueue(
                OBSERVE,
                {"session_id": session_id},
                order_key=session_order_key(session_id),
                dedupe_key=observe_dedupe_key(session_id),
            )
            log.info("project %s: observation of a session over the buffer resumed", project)

    def _resume_reflection(self, project: str, db: ProjectDatabase) -> None:
        """Sessions over the threshold whose set was not reflected on (a lost trigger, a failed run)."""
        conn = db.connection()
        rows = conn.execute(
            f"SELECT m.session_id FROM memories AS m WHERE m.kind = 'observation'"
            " AND NOT EXISTS (SELECT 1 FROM dropped_observations AS d WHERE d.observation_row = m.id)"
            f" GROUP BY m.session_id HAVING sum({sql_estimate('m.content')}) > ?",
            (self.settings.reflector.reflect_after_observation_tokens,),
        ).fetchall()
        cool_down = self.settings.reflector.resume_after_failure_seconds
        for (session_id,) in rows:
            if conn.execute(
                "SELECT 1 FROM jobs WHERE order_key = ? AND state IN ('queued', 'running') LIMIT 1",
                (session_order_key(session_id),),
            ).fetchone():
                continue  # work in flight decides about reflection when it ends
            failed = conn.execute(
                "SELECT created_at FROM om_events WHERE session_id = ? AND type = 'job_failed'"
                " AND json_extract(data, '$.kind') = ? ORDER BY id DESC LIMIT 1",
                (session_id, REFLECT),
            ).fetchone()
            if failed is not None and _age_seconds(failed[0]) < cool_down:
                continue
            if self.reflect.queue_if_due(self.queue(db), db, session_id) is not None:
                log.info("project %s: reflection of a session over the threshold queued", project)

    # -- reads ---------------------------------------------------------------------------------

    def projection(self, db: ProjectDatabase, session_id: str) -> Projection:
        with db.read() as conn:
            return project(conn, session_id)

    def memory_details(self, db: ProjectDatabase, session_id: str) -> dict[str, Any]:
        with db.read() as conn:
            return memory_details(conn, self.settings, session_id)

    def status(self, db: ProjectDatabase, session_id: str) -> dict[str, Any]:
        with db.read() as conn:
            return session_status(
                conn,
                self.settings,
                session_id,
                observer_state=self.observer_state,
                reflector_state=self.reflector_state,
            )

    def request_reflection(self, db: ProjectDatabase, session_id: str) -> EnqueueResult:
        """Reflect on the session's active memory now, below the threshold too."""
        return self.reflect.request(self.queue(db), session_id)

    # -- model switching -----------------------------------------------------------------------

    def models(self, db: ProjectDatabase) -> dict[str, Any]:
        with db.read() as conn:
            return {"models": effective_models(self.settings, read_overrides(conn))}

    def switch_models(self, db: ProjectDatabase, body: object) -> dict[str, Any]:
        """Apply ``{role: {model_id, context_window_tokens?} | null}``; the next job of each role uses it."""
        changes = parse_changes(body)
        with db.write() as conn:
            changed = apply_changes(conn, self.settings, changes)
            models = effective_models(self.settings, read_overrides(conn))
        return {"models": models, "changed": changed}

    def events(
        self,
        db: ProjectDatabase,
        *,
        after: int = 0,
        limit: int = eventlog.DEFAULT_LIST,
        session_id: str | None = None,
        types: tuple[str, ...] = (),
        newest: bool = False,
    ) -> list[dict[str, Any]]:
        with db.read() as conn:
            found = eventlog.list_events(
                conn, after=after, limit=limit, session_id=session_id, types=types, newest=newest
            )
        return [event.to_dict() for event in found]

    def close(self) -> None:
        self.clients.close()


def _queued(db: ProjectDatabase, kind: str, session_id: str) -> bool:
    row = (
        db.connection()
        .execute(
            "SELECT 1 FROM jobs WHERE order_key = ? AND kind = ? AND state = 'queued' LIMIT 1",
            (session_order_key(session_id), kind),
        )
        .fetchone()
    )
    return row is not None


def _age_seconds(iso: str) -> float:
    from datetime import UTC, datetime

    stamp = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return (datetime.now(UTC) - stamp).total_seconds()


__all__ = ["OBSERVE", "REFLECT", "ModelClients", "ObservationPipeline"]
