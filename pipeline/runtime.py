"""The runtime that wires the pipeline: the observe wing, the reflect wing and the views over one floor.

Flow::

    append_events (any surface) -> append hook -> observe trigger                 [observe.job]
    worker claims an "observe" job -> ObserveJob.handle: pack, Observer, commit   [observe.*]
      -> the session's backlog drained -> reflection due? queue a "reflect" job  (wired here)
    worker claims a "reflect" job -> ReflectJob.handle: claim, Reflector,
      Dropper, promote                                                            [reflect.*]
    housekeeping: stale activity rows, sessions left over the buffer or the reflection threshold
    reads: projection, details, status                                            [views.*]

The wings never import each other: this module is where observation hands a session on to reflection.
Everything a surface needs from the pipeline goes through :class:`ObservationPipeline`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apsw
import httpx

from obsmem.events import StoredEvent
from obsmem.pipeline.activity import clear_stale_activity
from obsmem.pipeline.clients import ModelClients
from obsmem.pipeline.llm import ChatModel
from obsmem.pipeline.model_overrides import Override, apply_changes, effective_models, parse_changes, read_overrides
from obsmem.pipeline.observe.job import ObserveJob
from obsmem.pipeline.observe.packer import Budget
from obsmem.pipeline.reflect.job import ReflectJob
from obsmem.pipeline.session_jobs import OBSERVE, REFLECT
from obsmem.pipeline.views.details import memory_details
from obsmem.pipeline.views.projection import Projection, project, projection_version
from obsmem.pipeline.views.status import session_status
from obsmem.settings import Settings
from obsmem.storage import ProjectDatabase
from obsmem.work import EnqueueResult, JobContext, JobQueue


class AppendHook:
    """The ``after_insert`` hook of one append; ``queued`` says whether it queued an observe job."""

    __slots__ = ("observe", "project", "queue", "queued")

    def __init__(self, observe: ObserveJob, queue: JobQueue, project: str | None = None) -> None:
        self.observe = observe
        self.queue = queue
        self.project = project
        self.queued = False

    def __call__(self, conn: apsw.Connection, session_id: str, events: list[StoredEvent]) -> None:
        queued = self.observe.after_insert(self.queue, conn, session_id, events, self.project)
        self.queued = queued or self.queued


class ObservationPipeline:
    """Everything the pipeline adds to a data directory; the service facade delegates to it."""

    def __init__(self, settings: Settings, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.settings = settings
        self.clients = ModelClients(settings, transport=transport)
        self.reflect = ReflectJob(settings, self.clients)
        self.observe = ObserveJob(settings, self.clients, on_drained=self._reflect_if_due)

    # -- configuration -------------------------------------------------------------------------

    @property
    def observer_state(self) -> str:
        """``enabled``, ``disabled`` (observer.enabled = false) or ``not_configured`` (no model)."""
        return self.observe.state

    @property
    def reflector_state(self) -> str:
        """``enabled``, ``disabled`` (reflector.enabled = false) or ``not_configured`` (no model)."""
        return self.reflect.state

    def budget(self, override: Override | None = None) -> Budget:
        """The Observer's request budget (envelope, memory, events) for its configured or switched model."""
        return self.observe.budget(override)

    def queue(self, db: ProjectDatabase) -> JobQueue:
        jobs = self.settings.jobs
        return JobQueue(
            db,
            lease_seconds=jobs.lease_seconds,
            retry_backoff_seconds=jobs.retry_backoff_seconds,
            max_attempts=jobs.max_retries + 1,
        )

    # -- work: the append trigger, the jobs, housekeeping ---------------------------------------

    def append_hook(self, db: ProjectDatabase, project: str | None = None) -> AppendHook:
        """The hook ``append_events`` runs inside its transaction for ``db`` (one per append)."""
        return AppendHook(self.observe, self.queue(db), project)

    def request_observation(self, db: ProjectDatabase, session_id: str, project: str | None = None) -> EnqueueResult:
        """Observe the session's whole backlog now, below the buffer threshold too (e.g. at session end)."""
        return self.observe.request(self.queue(db), session_id, project)

    def request_reflection(self, db: ProjectDatabase, session_id: str, project: str | None = None) -> EnqueueResult:
        """Reflect on the session's active memory now, below the threshold too."""
        return self.reflect.request(self.queue(db), session_id, project)

    def route_model(self, project: str, role: str, model: ChatModel | None) -> None:
        """Send ``role``'s model calls for ``project`` to ``model`` (``None``: back to the settings)."""
        self.clients.route(project, role, model)

    def unroute_model(self, project: str, role: str, model: ChatModel) -> None:
        """Stop routing ``role``'s calls for ``project`` to ``model`` (another model routed there stays)."""
        self.clients.unroute(project, role, model)

    @property
    def handlers(self) -> dict[str, Callable[[JobContext], None]]:
        return {OBSERVE: self.observe.handle, REFLECT: self.reflect.handle}

    def _reflect_if_due(self, ctx: JobContext, session_id: str) -> None:
        """All observe work of the session is durable: queue a reflect job if the threshold is passed."""
        self.reflect.queue_if_due(ctx.queue, ctx.db, session_id, ctx.project)

    @property
    def housekeeping_tasks(self) -> list[Callable[[str, ProjectDatabase], None]]:
        return [self.housekeep]

    def housekeep(self, project: str, db: ProjectDatabase) -> None:
        """Clear stale activity rows; queue observation for sessions left over the buffer, and reflection
        for sessions left over the reflection threshold."""
        clear_stale_activity(db, self.settings.jobs.stale_activity_seconds)
        if self.observe.state_for(project) == "enabled":
            self.observe.resume(project, db, self.queue(db))
        if self.reflect.state_for(project) == "enabled":
            self.reflect.resume(project, db, self.queue(db))

    # -- reads ---------------------------------------------------------------------------------

    def projection(self, db: ProjectDatabase, session_id: str) -> Projection:
        with db.read() as conn:
            return project(conn, session_id)

    def projection_version(self, db: ProjectDatabase, session_id: str) -> str:
        with db.read() as conn:
            return projection_version(conn, session_id)

    def memory_details(self, db: ProjectDatabase, session_id: str) -> dict[str, Any]:
        with db.read() as conn:
            return memory_details(conn, self.settings, session_id)

    def status(self, db: ProjectDatabase, session_id: str, project: str | None = None) -> dict[str, Any]:
        with db.read() as conn:
            return session_status(
                conn,
                self.queue(db),
                self.settings,
                session_id,
                observer_state=self.observe.state_for(project),
                reflector_state=self.reflect.state_for(project),
            )

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

    def close(self) -> None:
        self.clients.close()


__all__ = ["AppendHook", "ObservationPipeline"]
