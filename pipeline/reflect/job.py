"""The reflect job: threshold trigger, delta Reflector, bounded Dropper, one atomic promotion.

Flow::

    observe job drains a session's backlog (all its observe work is durable)
      -> active observation tokens > reflector.reflect_after_observation_tokens?
         and this active observation set not reflected on yet?  -> queue a "reflect" job
            (dedupe key = the generation id, so duplicate enqueues fold into one queued job)
    worker claims the job
      -> read the pool (active reflections, observations with coverage tiers)
      -> claim the generation (fenced write, with om_reflection_start)        [reflect.generations]
      -> Reflector: record_reflections, receipts, bounded rounds               [reflect.reflector]
      -> >= 1 new reflection and pool > pools.observations_max_tokens?
           Dropper: drop_observations proposals; server ranks and caps          [reflect.dropper]
      -> promote (fenced write): reflections + drops + pointer by compare-and-set + end events

Reflect jobs share the session's order key with observe jobs, so a session's observation and reflection
never run at the same time: a run's snapshot of the pool only changes through its own promotion.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from obsmem.errors import ReflectionOff
from obsmem.pipeline.activity import clear_activity, log_stage_event, set_activity
from obsmem.pipeline.clients import NO_MODEL, ModelClients
from obsmem.pipeline.memory_items import active_observation_ids, active_observation_tokens
from obsmem.pipeline.model_overrides import Override, read_overrides
from obsmem.pipeline.reflect.dropper import DropperResult, run_dropper
from obsmem.pipeline.reflect.generations import Claim, Drop, Promotion, claim_generation, promote
from obsmem.pipeline.reflect.pool import Pool, generation_id, read_pool
from obsmem.pipeline.reflect.reflector import ReflectorResult, citations_with, run_reflector
from obsmem.pipeline.session_jobs import (
    REFLECT,
    forced_reflect_dedupe_key,
    reflect_dedupe_key,
    seconds_since_failure,
    session_order_key,
)
from obsmem.pipeline.tokens import sql_estimate, token_cost
from obsmem.settings import Settings
from obsmem.storage import ProjectDatabase
from obsmem.work import EnqueueResult, JobContext, JobQueue, eventlog, sanitise_reason

log = logging.getLogger("obsmem.pipeline.reflect.job")


class ReflectJob:
    """Decides when a session is reflected on, runs the reflect job, and resumes sessions left over the
    threshold."""

    def __init__(self, settings: Settings, clients: ModelClients) -> None:
        self.settings = settings
        self.clients = clients

    @property
    def state(self) -> str:
        """``enabled``, ``disabled`` (reflector.enabled = false) or ``not_configured`` (no model)."""
        return self.state_for(None)

    def state_for(self, project: str | None) -> str:
        """:attr:`state` for one project, where a model routed to the project counts as configured."""
        if not self.settings.reflector.enabled:
            return "disabled"
        if self.clients.routed(project, "reflector") is not None:
            return "enabled"
        model = self.settings.model_for("reflector")
        return "enabled" if model.base_url and model.model_id else "not_configured"

    # -- the trigger ---------------------------------------------------------------------------

    def due(self, db: ProjectDatabase, session_id: str) -> str | None:
        """The generation id to reflect under, if the session is over the threshold with a set not
        reflected on yet (and no run of it in flight); else None."""
        with db.read() as conn:
            if active_observation_tokens(conn, session_id) <= self.settings.reflector.reflect_after_observation_tokens:
                return None
            generation = generation_id(session_id, active_observation_ids(conn, session_id))
            row = conn.execute("SELECT state FROM generations WHERE generation_id = ?", (generation,)).fetchone()
        if row is not None and row[0] != "running":
            return None
        return generation

    def queue_if_due(
        self, queue: JobQueue, db: ProjectDatabase, session_id: str, project: str | None = None
    ) -> EnqueueResult | None:
        if self.state_for(project) != "enabled":
            return None
        generation = self.due(db, session_id)
        if generation is None:
            return None
        return queue.enqueue(
            REFLECT,
            {"session_id": session_id, "generation_id": generation},
            order_key=session_order_key(session_id),
            dedupe_key=reflect_dedupe_key(generation),
        )

    def request(self, queue: JobQueue, session_id: str, project: str | None = None) -> EnqueueResult:
        """Reflect now, below the threshold too (the Dropper still only runs over the pool target)."""
        state = self.state_for(project)
        if state != "enabled":
            reason = "reflector.enabled is false" if state == "disabled" else NO_MODEL
            raise ReflectionOff(f"sessions are not reflected on here: {reason}")
        return queue.enqueue(
            REFLECT,
            {"session_id": session_id, "force": True},
            order_key=session_order_key(session_id),
            dedupe_key=forced_reflect_dedupe_key(session_id),
        )

    # -- housekeeping --------------------------------------------------------------------------

    def resume(self, project: str, db: ProjectDatabase, queue: JobQueue) -> None:
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
            if queue.in_flight(session_order_key(session_id), conn=conn):
                continue  # work in flight decides about reflection when it ends
            age = seconds_since_failure(conn, session_id, REFLECT)
            if age is not None and age < cool_down:
                continue
            if self.queue_if_due(queue, db, str(session_id), project) is not None:
                log.info("project %s: reflection of a session over the threshold queued", project)

    # -- the job -------------------------------------------------------------------------------

    def handle(self, ctx: JobContext) -> None:
        session_id = ctx.lease.payload.get("session_id")
        if not isinstance(session_id, str) or self.state_for(ctx.project) != "enabled":
            return
        db = ctx.db
        with db.read() as conn:
            pool = read_pool(conn, session_id)
            overrides = read_overrides(conn)
        threshold = self.settings.reflector.reflect_after_observation_tokens
        if not pool.observations or (not ctx.lease.payload.get("force") and pool.observation_tokens <= threshold):
            return
        cycle_id = uuid.uuid4().hex
        with ctx.fenced_write() as conn:
            claim = claim_generation(conn, pool, job_id=ctx.lease.job_id, cycle_id=cycle_id)
            if claim is None:
                return  # this observation set was reflected on already (a duplicate job)
            eventlog.record(
                conn,
                "om_reflection_start",
                session_id=session_id,
                cycle_id=cycle_id,
                job_id=ctx.lease.job_id,
                data={
                    "operation": "reflect",
                    "generation_id": claim.generation_id[:12],
                    "generation": claim.parent_number,
                    "observations": len(pool.observations),
                    "observation_tokens": pool.observation_tokens,
                    "reflections": len(pool.reflections),
                    "reflection_tokens": pool.reflection_tokens,
                    "threshold": threshold,
                    "takeover": claim.takeover,
                    "attempt": ctx.lease.attempt,
                },
            )
            set_activity(conn, session_id, ctx.lease.job_id, "reflector", pool.observation_tokens)
        _Run(self, ctx, pool, claim, overrides).run()


class _Run:
    """One claimed run: the two model stages and the promotion, with their events."""

    def __init__(
        self, job: ReflectJob, ctx: JobContext, pool: Pool, claim: Claim, overrides: dict[str, Override]
    ) -> None:
        self.job = job
        self.settings = job.settings
        self.ctx = ctx
        self.pool = pool
        self.claim = claim
        self.overrides = overrides
        self.stage = "reflection"
        self.started = time.monotonic()

    def _event(self, type_: str, data: dict[str, Any], conn: Any = None, **kwargs: Any) -> None:
        if conn is not None:
            eventlog.record(
                conn,
                type_,
                session_id=self.pool.session_id,
                cycle_id=self.claim.cycle_id,
                job_id=self.ctx.lease.job_id,
                data=data,
            )
        else:
            log_stage_event(
                self.ctx.db, type_, self.pool.session_id, self.claim.cycle_id, self.ctx.lease.job_id, data, **kwargs
            )

    def run(self) -> None:
        settings, pool, ctx = self.settings, self.pool, self.ctx
        reflector_started = self.started
        dropper_started: float | None = None
        try:
            project = self.ctx.project
            reflector_model = self.job.clients.model("reflector", self.overrides.get("reflector"), project=project)
            reflected = run_reflector(
                self.job.clients.get("reflector", self.overrides.get("reflector"), project=project),
                pool,
                context_window=reflector_model.context_window_tokens,
                ratio=settings.reflector.context_window_ratio,
                reflection_share=settings.reflector.reflection_share,
                threshold=settings.reflector.reflect_after_observation_tokens,
                max_rounds=settings.reflector.max_tool_rounds,
                max_chars=settings.reflector.max_reflection_chars,
                max_ids=settings.reflector.max_supporting_ids,
            )
            reflector_ms = round((time.monotonic() - reflector_started) * 1000)
            ctx.raise_if_lost()
            dropped: DropperResult | None = None
            target = settings.pools.observations_max_tokens
            if reflected.reflections and pool.observation_tokens > target:
                self.stage = "dropper"
                dropper_started = time.monotonic()
                self._event(
                    "om_dropper_start",
                    {
                        "operation": "drop",
                        "generation_id": self.claim.generation_id[:12],
                        "observation_tokens": pool.observation_tokens,
                        "target": target,
                        "over_by": pool.observation_tokens - target,
                        "new_reflections": len(reflected.reflections),
                        "attempt": ctx.lease.attempt,
                    },
                    activity=("dropper", pool.observation_tokens),
                )
                dropper_model = self.job.clients.model("dropper", self.overrides.get("dropper"), project=project)
                dropped = run_dropper(
                    self.job.clients.get("dropper", self.overrides.get("dropper"), project=project),
                    pool,
                    reflected.reflections,
                    citations_with(pool, reflected.reflections),
                    target=target,
                    context_window=dropper_model.context_window_tokens,
                    ratio=settings.dropper.context_window_ratio,
                    max_rounds=settings.dropper.max_tool_rounds,
                )
                ctx.raise_if_lost()
            self.stage = "promotion"
            drops = dropped.drops if dropped else []
            self._promote(reflected, reflector_ms, dropped, drops, dropper_started)
        except BaseException as exc:
            self._failed(exc, dropper_started)
            raise

    def _promote(
        self,
        reflected: ReflectorResult,
        reflector_ms: int,
        dropped: DropperResult | None,
        drops: list[Drop],
        dropper_started: float | None,
    ) -> None:
        pool = self.pool
        tokens_after = round(sum(o.tokens for o in pool.observations) - sum(d.observation.tokens for d in drops))
        dropper_ms = round((time.monotonic() - dropper_started) * 1000) if dropper_started is not None else 0
        with self.ctx.fenced_write() as conn:
            promotion = promote(conn, self.claim, reflected.reflections, drops, observation_tokens_after=tokens_after)
            kept = promotion.state == "promoted"
            new_tokens = round(sum(token_cost(r.content) for r in reflected.reflections)) if kept else 0
            self._event(
                "om_reflection_end",
                {
                    "duration_ms": reflector_ms,
                    "state": promotion.state,
                    "generation": promotion.number,
                    "reflections": promotion.reflections_added,
                    "rejected": reflected.rejected,
                    "duplicates": reflected.duplicates,
                    "rounds": reflected.rounds,
                    "stop_reason": reflected.stop_reason,
                    "tokens_to_reflect": reflected.shown_tokens,
                    "observations_shown": reflected.shown_observations,
                    "prompt_tokens": reflected.prompt_tokens,
                    "completion_tokens": reflected.completion_tokens,
                    "observation_tokens_before": pool.observation_tokens,
                    "observation_tokens_after": tokens_after if kept else pool.observation_tokens,
                    "reflection_tokens_before": pool.reflection_tokens,
                    "reflection_tokens_after": pool.reflection_tokens + new_tokens,
                },
                conn,
            )
            if dropped is not None:
                self._event(
                    "om_dropper_end",
                    {
                        "duration_ms": dropper_ms,
                        "state": promotion.state,
                        "generation": promotion.number,
                        "proposed": dropped.proposed,
                        "rejected": dropped.rejected,
                        "dropped": promotion.observations_dropped,
                        "capped": dropped.proposed - len(drops),
                        "rounds": dropped.rounds,
                        "stop_reason": dropped.stop_reason,
                        "observations_shown": dropped.shown_observations,
                        "prompt_tokens": dropped.prompt_tokens,
                        "completion_tokens": dropped.completion_tokens,
                        "observation_tokens_before": pool.observation_tokens,
                        "observation_tokens_after": tokens_after if kept else pool.observation_tokens,
                        "target": self.settings.pools.observations_max_tokens,
                    },
                    conn,
                )
            clear_activity(conn, pool.session_id, self.ctx.lease.job_id)
        _log_promotion(promotion)

    def _failed(self, exc: BaseException, dropper_started: float | None) -> None:
        now = time.monotonic()
        error = sanitise_reason(exc)
        common = {"error": error, "attempt": self.ctx.lease.attempt, "stage": self.stage}
        # Every stage that started gets its failure event: the Reflector's results are only kept with the
        # promotion, so a failed Dropper (or promotion) fails the reflection too.
        reflection_ms = round((now - self.started) * 1000)
        self._event("om_reflection_failed", common | {"duration_ms": reflection_ms}, clear=dropper_started is None)
        if dropper_started is not None:
            dropper_ms = round((now - dropper_started) * 1000)
            self._event("om_dropper_failed", common | {"duration_ms": dropper_ms}, clear=True)


def _log_promotion(promotion: Promotion) -> None:
    log.info(
        "session generation %s: %s (%d reflections added, %d observations dropped)",
        promotion.number,
        promotion.state,
        promotion.reflections_added,
        promotion.observations_dropped,
    )
