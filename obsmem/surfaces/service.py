"""The Python API: one object that every surface (HTTP, CLI, tools, MCP) calls.

from obsmem import Obsmem
memory = Obsmem(data_dir="~/.local/share/obsmem")
memory.append_events("my-app", "s1", [{"role": "user", "content": "fix the login test"}])
memory.search("my-app", "login")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from obsmem import eventlog
from obsmem.events import AppendReceipt, append_events
from obsmem.importing import ImportProgress, ImportReceipt, append_transcript, import_observations, read_transcript
from obsmem.jobs import EnqueueResult
from obsmem.memories import WriteReceipt, add_observations
from obsmem.pipeline.projection import Projection
from obsmem.pipeline.runtime import ObservationPipeline
from obsmem.projects import ProjectRegistry
from obsmem.retrieval.exact import ExactSearcher
from obsmem.retrieval.recall import recall as recall_memory
from obsmem.retrieval.results import SearchResult
from obsmem.retrieval.search import SearchRequest, run_exact
from obsmem.settings import Settings, load_settings
from obsmem.storage.connection import ProjectDatabase
from obsmem.validation import session_id as check_session_id
from obsmem.workers import WorkerPool


class Obsmem:
    """Memory for one data directory (many projects)."""

    def __init__(self, settings: Settings | None = None, *, data_dir: Path | str | None = None) -> None:
        if settings is None:
            settings = load_settings(data_dir=data_dir)
        elif data_dir is not None:
            settings = settings.model_copy(update={"data_dir": Path(data_dir)})
        self.settings = settings
        self.projects = ProjectRegistry(settings.data_dir)
        self.pipeline = ObservationPipeline(settings)
        self.workers: WorkerPool | None = None

    # -- writes ---------------------------------------------------------------------------------

    def append_events(self, project: str, session_id: str, events: list[Any]) -> AppendReceipt:
        """Store events; if the session's backlog reached the buffer, an observe job is queued with them.

        Never waits for a model: observation runs on the workers (``start_workers`` / ``obsmem worker``).
        """
        db = self.projects.get(project, create=True)
        hook = self.pipeline.append_hook(db)
        receipt = append_events(db, session_id, events, after_insert=hook)
        if hook.queued:
            self._wake_workers()
        return receipt

    def import_jsonl(
        self,
        project: str,
        path: Path | str,
        session_id: str | None = None,
        *,
        progress: ImportProgress | None = None,
    ) -> ImportReceipt:
        """Import a JSONL transcript; ``progress(phase, done, total)`` is told how far it got.

        The whole file is validated before the project is opened, so a bad file creates nothing. Like
        appends, it queues observation for sessions whose backlog reached the buffer.
        """
        parsed = read_transcript(Path(path), session_id, progress)
        db = self.projects.get(project, create=True)
        hook = self.pipeline.append_hook(db)
        receipt = append_transcript(db, parsed, progress, after_insert=hook)
        if hook.queued:
            self._wake_workers()
        return receipt

    def observe(self, project: str, session_id: str) -> EnqueueResult:
        """Queue observation of the session's whole backlog now (below the buffer threshold too)."""
        session_id = check_session_id(session_id)
        result = self.pipeline.request_observation(self.projects.get(project), session_id)
        self._wake_workers()
        return result

    def add_observations(self, project: str, observations: list[Any]) -> WriteReceipt:
        return add_observations(self.projects.get(project, create=True), observations)

    def import_observations(
        self, project: str, path: Path | str, *, progress: ImportProgress | None = None
    ) -> WriteReceipt:
        """Write a JSONL file of observations; the receipt's ``index`` is the line number minus one."""
        return import_observations(self.projects.get(project, create=True), Path(path), progress)

    # -- reads ----------------------------------------------------------------------------------

    def search(
        self,
        project: str,
        query: object,
        *,
        after: object = None,
        before: object = None,
        limit: object = None,
        mode: object = None,
        session_id: object = None,
    ) -> SearchResult:
        request = SearchRequest.parse(
            query=query,
            after=after,
            before=before,
            limit=limit,
            mode=mode,
            session_id=session_id,
            default_mode=self.default_mode,
            limits=self.settings.search,
        )
        db = self.projects.get(project)
        if request.mode == "hybrid":
            from obsmem.errors import ValidationFailed

            raise ValidationFailed(
                "hybrid mode needs the [semantic] section in the settings file", code="mode_unavailable", field="mode"
            )
        with db.read() as conn:
            return run_exact(ExactSearcher(conn), request)

    def recall(self, project: str, memory_id: object, *, session_id: str | None = None) -> dict[str, Any]:
        db = self.projects.get(project)
        with db.read() as conn:
            return recall_memory(conn, memory_id, session_id=session_id, project=project)

    @property
    def default_mode(self) -> str:
        return "exact"

    # -- the observation pipeline ---------------------------------------------------------------

    def memory(self, project: str, session_id: str) -> Projection:
        """The session's active memory rendered for injection at compaction (instant, no model call)."""
        session_id = check_session_id(session_id)
        return self.pipeline.projection(self.projects.get(project), session_id)

    def session_status(self, project: str, session_id: str) -> dict[str, Any]:
        """Progress state: idle/observing/reflecting, backlog against the threshold, activity, last error,
        the active generation and the pool's pressure."""
        session_id = check_session_id(session_id)
        return self.pipeline.status(self.projects.get(project), session_id)

    def memory_details(self, project: str, session_id: str) -> dict[str, Any]:
        """The active memory for inspection: generation, pool pressure, reflections with their supporting
        observations, observations with their coverage tier and source events."""
        session_id = check_session_id(session_id)
        return self.pipeline.memory_details(self.projects.get(project), session_id)

    def reflect(self, project: str, session_id: str) -> EnqueueResult:
        """Queue a Reflector run over the session's active memory now (below the threshold too)."""
        session_id = check_session_id(session_id)
        db = self.projects.get(project)
        if db.query("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)) == []:
            from obsmem.errors import NotFound

            raise NotFound(f"session '{session_id}' has no events", code="session_not_found", field="session_id")
        result = self.pipeline.request_reflection(db, session_id)
        self._wake_workers()
        return result

    def models(self, project: str) -> dict[str, Any]:
        """The model each role (observer, reflector, dropper) uses for its next job, and where it comes from."""
        return self.pipeline.models(self.projects.get(project))

    def switch_models(self, project: str, changes: object) -> dict[str, Any]:
        """Switch roles' models at run time: ``{"reflector": {"model_id": "..."}, "dropper": null}``.

        ``null`` returns a role to the settings file. Logged as ``om_model_changed``; used by the next job.
        """
        return self.pipeline.switch_models(self.projects.get(project), changes)

    def pipeline_events(
        self,
        project: str,
        *,
        after: object = None,
        limit: object = None,
        session_id: str | None = None,
        types: tuple[str, ...] = (),
        newest: bool = False,
    ) -> list[dict[str, Any]]:
        """The om event log, oldest first, from the event after ``after`` (an event id).

        ``newest`` returns the last ``limit`` events (still oldest first) instead of the first.
        """
        if session_id is not None:
            session_id = check_session_id(session_id)
        return self.pipeline.events(
            self.projects.get(project),
            after=eventlog.parse_after(after),
            limit=eventlog.parse_list_limit(limit),
            session_id=session_id,
            types=types,
            newest=newest,
        )

    def jobs(self, project: str, *, states: tuple[str, ...] = (), limit: int = 100) -> dict[str, Any]:
        queue = self.pipeline.queue(self.projects.get(project))
        return {"counts": queue.counts(), "jobs": queue.list_jobs(states=states, limit=limit)}

    def worker_pool(self) -> WorkerPool:
        """The pool that runs background jobs for every project of this data directory (not started)."""
        if self.workers is None:
            self.workers = WorkerPool(
                self.projects,
                self.pipeline.handlers,
                self.settings.jobs,
                housekeeping=self.pipeline.housekeeping_tasks,
            )
        return self.workers

    def start_workers(self, *, threads: int | None = None, housekeeping: bool = True) -> WorkerPool:
        pool = self.worker_pool()
        pool.start(threads=threads, housekeeping=housekeeping)
        return pool

    def stop_workers(self, timeout: float = 10.0) -> None:
        if self.workers is not None:
            self.workers.stop(timeout)

    def _wake_workers(self) -> None:
        if self.workers is not None and self.workers.running:
            self.workers.wake()

    def status(self, project: str) -> dict[str, Any]:
        db = self.projects.get(project)
        with db.read() as conn:
            sessions, events = conn.execute("SELECT count(*), coalesce(sum(event_count), 0) FROM sessions").fetchone()
            kinds = dict(conn.execute("SELECT kind, count(*) FROM memories GROUP BY kind").fetchall())
            last = conn.execute("SELECT max(updated_at) FROM sessions").fetchone()[0]
            generations = conn.execute("SELECT count(*) FROM generations WHERE state = 'promoted'").fetchone()[0]
            dropped = conn.execute("SELECT count(*) FROM dropped_observations").fetchone()[0]
        return {
            "project": project,
            "sessions": sessions,
            "events": events,
            "observations": kinds.get("observation", 0),
            "reflections": kinds.get("reflection", 0),
            "last_activity": last,
            "database_bytes": db.path.stat().st_size,
            "mode": self.default_mode,
            "dropped_observations": dropped,
            "generations": generations,
            "observer": self.pipeline.observer_state,
            "reflector": self.pipeline.reflector_state,
            "jobs": self.pipeline.queue(db).counts(),
        }

    def project_names(self) -> list[str]:
        return self.projects.names()

    def database(self, project: str, *, create: bool = False) -> ProjectDatabase:
        return self.projects.get(project, create=create)

    def close(self) -> None:
        self.stop_workers()
        self.pipeline.close()
        self.projects.close()

    def __enter__(self) -> Obsmem:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
