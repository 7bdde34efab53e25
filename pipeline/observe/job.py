"""The observe job: the append trigger, the job itself, and resuming sessions left over the buffer.

Flow::

    append_events (any surface)
      -> append hook, inside the append's transaction: backlog += event tokens     [observe.coverage]
         backlog >= observer.buffer_tokens -> queue an "observe" job (deduplicated per session)
    worker (in `obsmem serve` or `obsmem worker`) claims the job
      -> pack the next chunk of uncovered events (+ existing memory for context)   [observe.packer]
      -> Observer cycle with the model (record_observations, receipts, rounds)     [observe.observer]
      -> one fenced transaction: observations + coverage rows + progress counters
         + om_observation_end                                                      [observe.coverage]
      -> repeat until the backlog is empty (or max_chunks_per_job, then a continuation job)
      -> backlog drained: hand the session on (the runtime queues reflection when it is due)

The append path never calls a model and never waits for one: it adds a few rows to its own transaction.
Everything here reads and writes through the observe wing and the shared floor; what happens once a
session's observe work is durable is the caller's ``on_drained``.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable

import apsw

from obsmem.errors import ConfigurationError, ObservationOff
from obsmem.events import StoredEvent
from obsmem.pipeline.activity import clear_activity, log_stage_event
from obsmem.pipeline.clients import NO_MODEL, ModelClients
from obsmem.pipeline.llm import ChatModel
from obsmem.pipeline.memory_items import MemoryItem, active_memory, active_observation_tokens, memory_exists
from obsmem.pipeline.model_overrides import Override, read_overrides
from obsmem.pipeline.observe.coverage import add_to_backlog, commit_chunk, pending_events, read_progress
from obsmem.pipeline.observe.hygiene import DEFAULT_MEMORY_TOOLS, DEFAULT_OMIT_TAGS, render_event
from obsmem.pipeline.observe.observer import run_cycle
from obsmem.pipeline.observe.packer import Budget, EventChunk, pack_chunk, select_memory
from obsmem.pipeline.observe.prompts import prompt_overhead_tokens
from obsmem.pipeline.session_jobs import (
    OBSERVE,
    forced_observe_dedupe_key,
    observe_dedupe_key,
    seconds_since_failure,
    session_order_key,
)
from obsmem.settings import Settings
from obsmem.storage import ProjectDatabase
from obsmem.work import EnqueueResult, JobContext, JobQueue, sanitise_reason

log = logging.getLogger("obsmem.pipeline.observe")

DrainedHandler = Callable[[JobContext, str], None]


class ObserveJob:
    """Decides when a session is observed, and runs the observe job."""

    def __init__(self, settings: Settings, clients: ModelClients, *, on_drained: DrainedHandler) -> None:
        self.settings = settings
        self.clients = clients
        self.on_drained = on_drained
        self.render = functools.partial(render_event, omit_tags=DEFAULT_OMIT_TAGS, memory_tools=DEFAULT_MEMORY_TOOLS)
        if self.state == "enabled":
            self.budget()  # fail at start-up, not in the first job, if the numbers cannot work

    @property
    def state(self) -> str:
        """``enabled``, ``disabled`` (observer.enabled = false) or ``not_configured`` (no model)."""
        return self.state_for(None)

    def state_for(self, project: str | None) -> str:
        """:attr:`state` for one project, where a model routed to the project counts as configured."""
        if not self.settings.observer.enabled:
            return "disabled"
        if self.clients.routed(project, "observer") is not None:
            return "enabled"
        model = self.settings.model_for("observer")
        return "enabled" if model.base_url and model.model_id else "not_configured"

    def budget(self, override: Override | None = None, project: str | None = None) -> Budget:
        observer = self.settings.observer
        try:
            return Budget.plan(
                self.clients.model("observer", override, project=project).context_window_tokens,
                observer.context_window_ratio,
                observer.memory_share,
                prompt_overhead_tokens(observer.max_observation_chars),
            )
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None

    # -- the trigger ---------------------------------------------------------------------------

    def after_insert(
        self,
        queue: JobQueue,
        conn: apsw.Connection,
        session_id: str,
        events: list[StoredEvent],
        project: str | None = None,
    ) -> bool:
        """Count the backlog; queue an observe job if it reached the buffer. Returns whether one was queued."""
        backlog = add_to_backlog(conn, session_id, events)
        if backlog < self.settings.observer.buffer_tokens or not self._enabled(project):
            return False
        dedupe_key = observe_dedupe_key(session_id)
        # Usually a job is already waiting: one indexed lookup, and the append is done.
        if queue.has_queued_dedupe(dedupe_key, conn=conn):
            return False
        return queue.enqueue(
            OBSERVE,
            {"session_id": session_id},
            order_key=session_order_key(session_id),
            dedupe_key=dedupe_key,
            conn=conn,
        ).created

    def _enabled(self, project: str | None = None) -> bool:
        """``state == "enabled"`` without building the merged model settings (append path)."""
        observer, shared = self.settings.observer, self.settings.model
        return bool(
            observer.enabled
            and (
                ((observer.model.base_url or shared.base_url) and (observer.model.model_id or shared.model_id))
                or self.clients.routed(project, "observer") is not None
            )
        )

    def request(self, queue: JobQueue, session_id: str, project: str | None = None) -> EnqueueResult:
        """Observe the session's whole backlog now, below the buffer threshold too (e.g. at session end)."""
        state = self.state_for(project)
        if state != "enabled":
            reason = "observer.enabled is false" if state == "disabled" else NO_MODEL
            raise ObservationOff(f"sessions are not observed here: {reason}")
        return self._queue_forced(queue, session_id)

    @staticmethod
    def _queue_forced(queue: JobQueue, session_id: str) -> EnqueueResult:
        return queue.enqueue(
            OBSERVE,
            {"session_id": session_id, "force": True},
            order_key=session_order_key(session_id),
            dedupe_key=forced_observe_dedupe_key(session_id),
        )

    # -- the job -------------------------------------------------------------------------------

    def handle(self, ctx: JobContext) -> None:
        session_id = ctx.lease.payload.get("session_id")
        if not isinstance(session_id, str):
            raise ConfigurationError("observe job without a session_id")
        db = ctx.db
        backlog = read_progress(db.connection(), session_id).pending_tokens
        if self.state == "disabled":
            return
        if not ctx.lease.payload.get("force") and backlog < self.settings.observer.buffer_tokens:
            # An earlier job observed the backlog already (and, seeing this job queued, left the decision
            # about reflection to it).
            self._drained(ctx, session_id)
            return
        override = read_overrides(db.connection()).get("observer")
        client = self.clients.get("observer", override, project=ctx.project)
        budget = self.budget(override, ctx.project)
        for _ in range(self.settings.observer.max_chunks_per_job):
            ctx.raise_if_lost()
            packed = self._next_chunk(db, session_id, budget)
            if packed is None:
                break
            self._observe_chunk(ctx, client, session_id, *packed)
        else:
            with db.read() as conn:
                more = pending_events(conn, session_id, self.render, enough_tokens=0)
            if more:
                self._queue_forced(ctx.queue, session_id)
                return  # observe work is still pending: the continuation decides about reflection
        self._drained(ctx, session_id)

    def _next_chunk(
        self, db: ProjectDatabase, session_id: str, budget: Budget
    ) -> tuple[EventChunk, list[MemoryItem]] | None:
        """The next chunk of uncovered events and the existing memory shown beside it (one read snapshot)."""
        with db.read() as conn:
            pending = pending_events(conn, session_id, self.render, enough_tokens=budget.events)
            chunk = pack_chunk(pending, budget.events)
            if chunk is None:
                return None
            return chunk, select_memory(active_memory(conn, session_id), budget.memory)

    def _drained(self, ctx: JobContext, session_id: str) -> None:
        """All observe work of the session is durable, unless more is queued (then the last job decides).

        Best effort: if ``on_drained`` fails (or the worker dies first), housekeeping finds the session later.
        """
        if ctx.queue.has_queued(session_order_key(session_id), OBSERVE):
            return
        try:
            self.on_drained(ctx, session_id)
        except Exception as exc:  # noqa: BLE001 - observation succeeded; reflection is retried by housekeeping
            log.warning("could not queue reflection: %s", type(exc).__name__)

    def _observe_chunk(
        self, ctx: JobContext, client: ChatModel, session_id: str, chunk: EventChunk, memory: list[MemoryItem]
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

    def resume(self, project: str, db: ProjectDatabase, queue: JobQueue) -> None:
        """Queue observation for sessions left over the buffer with no observe job in flight."""
        cool_down = self.settings.observer.resume_after_failure_seconds
        conn = db.connection()
        rows = conn.execute(
            "SELECT p.session_id FROM observer_progress AS p WHERE p.pending_tokens >= ?",
            (self.settings.observer.buffer_tokens,),
        ).fetchall()
        for (session_id,) in rows:
            if queue.in_flight(session_order_key(session_id), OBSERVE, conn=conn):
                continue  # the job in flight observes the backlog
            # Only a failed observe job cools the session down: a failing Reflector is no reason to
            # leave the backlog unobserved.
            age = seconds_since_failure(conn, session_id, OBSERVE)
            if age is not None and age < cool_down:
                continue
            queue.enqueue(
                OBSERVE,
                {"session_id": session_id},
                order_key=session_order_key(session_id),
                dedupe_key=observe_dedupe_key(session_id),
            )
            log.info("project %s: observation of a session over the buffer resumed", project)
