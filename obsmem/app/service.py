"""The Python API: one object that every surface (HTTP, CLI, tools, MCP) and the eval harness calls.

from obsmem import Obsmem
memory = Obsmem(data_dir="~/.local/share/obsmem")
memory.append_events("my-app", "s1", [{"role": "user", "content": "fix the login test"}])
memory.search("my-app", "login")
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from obsmem.app.results import (
    Forgotten,
    IndexReport,
    IndexStatus,
    IndexTotals,
    JobList,
    MemoryDetails,
    ModelChoices,
    ModelSwitch,
    ProjectStatus,
    Recollection,
    SessionStatus,
    TrustStatus,
)
from obsmem.app.search_checks import check_search
from obsmem.app.typed import build
from obsmem.errors import NotFound, ValidationFailed
from obsmem.events import (
    AppendReceipt,
    PreparedEvent,
    append_events,
    append_prepared,
    index_conversation_step,
    index_event_trigrams,
    require_session,
    session_totals,
    unindexed_events,
)
from obsmem.importing import ImportProgress, ImportReceipt, append_transcript, import_observations, read_transcript
from obsmem.memories import WriteReceipt, add_observations, delete_memory, memory_counts
from obsmem.pipeline import ChatModel, ObservationPipeline, Projection, project_generation_totals
from obsmem.projects import ProjectRegistry
from obsmem.retrieval import (
    RecalledEvent,
    SearchModes,
    SearchRequest,
    SearchResult,
    find_memory_row,
    recall_any,
)
from obsmem.settings import Settings, load_settings
from obsmem.storage import ProjectDatabase
from obsmem.transcripts import (
    IMPORT_MARKS_DIR,
    FileProgress,
    ImportOptions,
    ImportRun,
    ReaderOptions,
    TranscriptImporter,
    UnsavedWatermarks,
    expand_home,
)
from obsmem.trust import (
    LOCAL_USER,
    CalibrationReport,
    GroomReport,
    Judgment,
    JudgmentList,
    Note,
    NoteList,
    NoteWrite,
    ProjectionWithNotes,
    RecalledNote,
    TrustService,
)
from obsmem.validation import project_name
from obsmem.validation import session_id as check_session_id
from obsmem.work import EnqueueResult, WorkerPool, eventlog

if TYPE_CHECKING:
    from obsmem.indexer import BatchReport, SemanticIndexer
    from obsmem.retrieval import HybridSearcher, Reranker, SearchPlan, StageRankings

# The keys of an indexing run's totals; the rest of the indexer's report is the index status after it.
_TOTALS = tuple(IndexTotals.__dataclass_fields__)


class EventPush(Protocol):
    """Wakes a follower of one project's event log when an event is recorded (by any server)."""

    def token(self) -> int:
        """Take before reading the log: a wait returns at once for any event recorded after this."""
        ...

    async def wait(self, token: int, timeout: float) -> bool:
        """Wait until an event was recorded after ``token`` was taken (True) or ``timeout`` passed (False)."""
        ...


class Obsmem:
    """Memory for one data directory (many projects)."""

    def __new__(cls, settings: Settings | None = None, *, data_dir: Path | str | None = None, **_: Any) -> Obsmem:
        # With [storage] backend = "postgres" the same constructor builds the PostgreSQL service, which
        # answers what that backend supports and refuses the rest by name (obsmem/app/postgres.py).
        if (
            cls is Obsmem
            and (settings if settings is not None else load_settings(data_dir=data_dir)).storage.backend == "postgres"
        ):
            from obsmem.app.postgres import PostgresObsmem

            return super().__new__(PostgresObsmem)
        return super().__new__(cls)

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        data_dir: Path | str | None = None,
        background_indexing: bool | None = None,
    ) -> None:
        """``background_indexing`` overrides ``semantic.index.background`` (the CLI's one-shot commands
        turn it off)."""
        if settings is None:
            settings = load_settings(data_dir=data_dir)
        elif data_dir is not None:
            settings = settings.model_copy(update={"data_dir": Path(data_dir)})
        self.settings = settings
        self.projects = ProjectRegistry(settings.data_dir)
        self.pipeline = ObservationPipeline(settings)
        self.workers: WorkerPool | None = None
        self.indexer: SemanticIndexer | None = None
        self.hybrid: HybridSearcher | None = None
        self.reranker: Reranker | None = None
        if settings.semantic is not None and settings.semantic.enabled:
            from obsmem.indexer import SemanticIndexer
            from obsmem.retrieval import HybridSearcher, make_reranker

            self.indexer = SemanticIndexer(settings.semantic, self.projects)
            self.reranker = make_reranker(settings.semantic.reranker)
            self.hybrid = HybridSearcher(self.indexer, settings.semantic, self.reranker)
            background = settings.semantic.index.background if background_indexing is None else background_indexing
            if background:
                self.indexer.start_background()
        self.search_modes = SearchModes(self.hybrid)
        # Watermarks of transcripts that stored nothing in a project not made yet (see UnsavedWatermarks).
        self._unsaved_watermarks = UnsavedWatermarks(self.projects.data_dir / IMPORT_MARKS_DIR)
        self.trust = TrustService(settings, self.projects, self._wake_workers)

    def _memories_changed(self, project: str) -> None:
        if self.indexer is not None:
            self.indexer.notify(project)

    # -- writes ---------------------------------------------------------------------------------

    def append_events(self, project: str, session_id: str, events: list[Any]) -> AppendReceipt:
        """Store events; if the session's backlog reached the buffer, an observe job is queued with them.

        An event identical to the one stored at its ``seq`` is a duplicate, so events that carry their seqs
        may be sent again after a failure; events without one are numbered after the session's last event
        and would be stored again.

        Never waits for a model: observation runs on the workers (``start_workers`` / ``obsmem worker``).
        """
        session_id = check_session_id(session_id)  # a refused session id creates no project
        db = self.projects.get(project, create=True)
        hook = self.pipeline.append_hook(db, project)
        receipt = append_events(db, session_id, events, after_insert=hook)
        if hook.queued:
            self._wake_workers()
        return receipt

    def append_prepared_events(
        self, project: str, session_id: str, events: list[PreparedEvent], seqs: list[int | None] | None = None
    ) -> AppendReceipt:
        """:meth:`append_events` for events already validated and redacted (``obsmem.events.prepare_event``),
        as the transcript importer hands them over; ``seqs`` numbers them. The Observer's trigger applies."""
        session_id = check_session_id(session_id)
        db = self.projects.get(project, create=True)
        hook = self.pipeline.append_hook(db, project)
        receipt = append_prepared(db, session_id, events, seqs=seqs, after_insert=hook)
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

        The whole file is validated before the project is opened, so a bad file creates nothing, and neither
        does a file without events. Like appends, it queues observation for sessions whose backlog reached
        the buffer.
        """
        project_name(project)  # a bad project name is reported before the file is read
        parsed = read_transcript(Path(path), session_id, progress)
        if not parsed:
            return ImportReceipt()  # a write that stores nothing must not create a project
        db = self.projects.get(project, create=True)
        hook = self.pipeline.append_hook(db, project)
        receipt = append_transcript(db, parsed, progress, after_insert=hook)
        if hook.queued:
            self._wake_workers()
        return receipt

    def import_transcripts(
        self,
        source: str,
        paths: list[Path] | list[str],
        *,
        project: str | None = None,
        progress: FileProgress | None = None,
    ) -> ImportRun:
        """Import agents' transcript files (``source``: ``claude-code``, ``codex``, ...) incrementally.

        Each file's events go to its project (``project``, else mapped from the working directory it
        records, see ``[transcripts]``) through :meth:`append_events`, so redaction and the Observer's
        trigger apply; a file already imported stores only what was added since (see obsmem.transcripts).
        """
        if project is not None:
            project_name(project)
        config = self.settings.transcripts
        options = ImportOptions(
            reader=ReaderOptions(config.max_tool_output_chars, config.keep_thinking),
            project_map=config.project_map,
            project=project,
            reading_processes=config.reading_processes,
            reading_min_bytes=int(config.reading_min_megabytes * 1024 * 1024),
        )
        # Projects are opened, not created: the append creates one with its first event, so an import that
        # stores nothing leaves no project behind.
        importer = TranscriptImporter(
            source, options, self.append_prepared_events, self.database, self._unsaved_watermarks
        )
        return importer.run([expand_home(path) for path in paths], progress)

    def observe(self, project: str, session_id: str) -> EnqueueResult:
        """Queue observation of the session's whole backlog now (below the buffer threshold too)."""
        return self._queue_now(project, session_id, self.pipeline.request_observation)

    def _queue_now(
        self, project: str, session_id: str, request: Callable[[ProjectDatabase, str, str], EnqueueResult]
    ) -> EnqueueResult:
        """Queue a pipeline job for an existing session and wake the workers for it."""
        session_id = check_session_id(session_id)
        db = self.projects.get(project)
        with db.read() as conn:
            require_session(conn, session_id)
        result = request(db, session_id, project)
        self._wake_workers()
        return result

    def _observed_project(self, project: str) -> ProjectDatabase | None:
        """The project observations are written to, or None if it does not exist: it has no events to cite,
        so every item will be rejected, and a write that stores nothing must not create a project."""
        return self.projects.get(project) if self.projects.exists(project) else None

    def add_observations(self, project: str, observations: list[Any]) -> WriteReceipt:
        receipt = add_observations(self._observed_project(project), observations)
        if receipt.added:
            self._memories_changed(project)
        return receipt

    def forget(self, project: str, memory_id: object, *, session_id: str | None = None) -> Forgotten:
        """Delete one memory (an observation or a reflection) by id or unique prefix.

        It leaves every search result at once (hybrid search checks each chunk against the current
        memories); its chunks, keyword rows and embeddings go at the next indexing batch. The events it
        cites are kept. Returns the deleted memory as a hit.
        """
        db = self.projects.get(project)
        # Resolved first in a read, where an id that is no memory's may cost a scan of the events not indexed
        # yet (to say whether it names an event) without holding the writer lock; then again under the lock,
        # where a memory is found by its index alone.
        with db.read() as conn:
            find_memory_row(conn, memory_id, session_id=session_id, project=project)
        with db.write() as conn:
            row_id, hit, _ = find_memory_row(
                conn, memory_id, session_id=session_id, project=project, scan_unindexed=False
            )
            delete_memory(conn, row_id)
        self._memories_changed(project)
        return Forgotten(deleted=hit)

    def import_observations(
        self, project: str, path: Path | str, *, progress: ImportProgress | None = None
    ) -> WriteReceipt:
        """Write a JSONL file of observations; the receipt's ``index`` is the line number minus one."""
        receipt = import_observations(self._observed_project(project), Path(path), progress)
        if receipt.added:
            self._memories_changed(project)
        return receipt

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
        scope: object = None,
        trust: object = None,
        user: str | None = LOCAL_USER,
    ) -> SearchResult:
        """``scope``: ``memories`` (None: observations and reflections), ``conversation`` (the events
        themselves) or ``all`` (both, one ranking). Memories come with the notes the query finds: trusted ones
        (``trust="trusted"``, the default) or candidates too, marked untrusted (``trust="all"``). ``user`` owns
        the user tier searched beside the project (:data:`~obsmem.trust.LOCAL_USER` by default; None: no user
        tier). After the hits are fixed, candidates the query found are queued for judging in the background
        (docs/trust.md)."""
        checked = check_search(
            query,
            after=after,
            before=before,
            limit=limit,
            mode=mode,
            session_id=session_id,
            scope=scope,
            trust=trust,
            default_mode=self.default_mode,
            limits=self.settings.search,
        )
        request, level = checked.request, checked.trust
        result = self.search_modes.run(self._searched(project), project, request)
        return self.trust.search(result, project, request, level, user)

    def _searched(self, project: str) -> Any:
        """The project database a search reads (a PostgreSQL service reads its project schema)."""
        return self.projects.get(project)

    def search_stages(
        self,
        project: str,
        query: object,
        plan: SearchPlan | None = None,
        *,
        after: object = None,
        before: object = None,
        limit: object = None,
        session_id: object = None,
        scope: object = None,
    ) -> tuple[SearchResult, StageRankings]:
        """A hybrid search run as ``plan`` says (one list alone, no rerank, no floor), with the ranking
        after each stage. For evaluation and diagnostics; ``search`` is the same code with the default
        plan."""
        request = SearchRequest.parse(
            query=query,
            after=after,
            before=before,
            limit=limit,
            mode="hybrid",
            session_id=session_id,
            scope=scope,
            limits=self.settings.search,
        )
        return self.search_modes.hybrid_searcher().run(project, request, plan)

    def recall(
        self, project: str, memory_id: object, *, session_id: str | None = None, user: str | None = LOCAL_USER
    ) -> Recollection | RecalledEvent | RecalledNote:
        """A memory and its provenance, or (for the id of a conversation event) the event with the events
        around it in its session (``search.recall_neighbours`` each side) and the observations citing it, or
        (for the id of a note, in the project or ``user``'s tier, whatever ``session_id`` says: notes belong
        to no session) the note with its standing, judgments and history."""
        db = self.projects.get(project)
        neighbours = self.settings.search.recall_neighbours
        try:
            with db.read() as conn:
                parts = recall_any(conn, memory_id, session_id=session_id, project=project, neighbours=neighbours)
        except NotFound:
            note = self.trust.recall_note(project, str(memory_id), user)
            if note is None:
                raise
            return note
        if isinstance(parts, RecalledEvent):
            return parts
        return Recollection(memory=parts.memory, sources=parts.sources, supporting=parts.supporting)

    @property
    def default_mode(self) -> str:
        """``hybrid`` when semantic mode is on, else ``exact`` (tool descriptions follow this)."""
        return self.search_modes.default_mode

    def index(
        self, project: str, progress: Callable[[BatchReport], None] | None = None, *, every_core: bool = False
    ) -> IndexReport:
        """Index everything pending for ``project`` now (``obsmem index``), then publish the graph file.
        ``every_core``: nothing else in this process needs a core (no background indexer, no queries)."""
        if self.indexer is None:
            raise ValidationFailed(
                "indexing needs the [semantic] section in the settings file", code="mode_unavailable"
            )
        report = self.indexer.backfill(project, progress, every_core=every_core)
        totals = {name: report.pop(name) for name in _TOTALS}
        return IndexReport(totals=build(IndexTotals, totals), status=build(IndexStatus, report))

    # -- agent-written notes with earned trust (docs/trust.md) -------------------------------------

    def save_note(
        self,
        project: str,
        content: object,
        *,
        situation: object = None,
        tier: object = None,
        user: str | None = LOCAL_USER,
    ) -> NoteWrite:
        """Store a note as an untrusted candidate (``tier``: ``project``, the default, or ``user``)."""
        return self.trust.save(project, content, situation=situation, tier=tier, user=user)

    def update_note(
        self, project: str, note_id: object, content: object, *, situation: object = None, user: str | None = LOCAL_USER
    ) -> NoteWrite:
        """A new candidate that supersedes the note when (and only when) it is promoted."""
        return self.trust.update(project, note_id, content, situation=situation, user=user)

    def forget_note(self, project: str, note_id: object, *, user: str | None = LOCAL_USER) -> Note:
        """Mark a note forgotten: it leaves every search at once."""
        return self.trust.forget(project, note_id, user=user)

    def notes(
        self, project: str, *, status: object = None, limit: object = None, user: str | None = LOCAL_USER
    ) -> NoteList:
        """The newest notes (at most ``limit``, 1-500, default 500); ``truncated`` says whether more exist."""
        return self.trust.notes(project, status=status, limit=limit, user=user)

    def judgments(
        self, project: str, *, state: object = None, limit: object = None, user: str | None = LOCAL_USER
    ) -> JudgmentList:
        """The newest judgments (at most ``limit``, 1-500, default 500); ``truncated`` says whether more exist."""
        return self.trust.judgments(project, state=state, limit=limit, user=user)

    def resolve_judgment(
        self, project: str, judgment_id: object, outcome: object, *, user: str | None = LOCAL_USER
    ) -> Judgment:
        """A person's answer to a judgment: was the note relevant? A true answer lets groom promote it."""
        return self.trust.resolve(project, judgment_id, outcome, user=user)

    def groom(self, project: str, *, user: str | None = LOCAL_USER) -> GroomReport:
        """Promote candidates whose judgments resolved true (bounded per pass); list what waits for people."""
        return self.trust.groom(project, user=user)

    def calibrate_trust(self, project: str, *, tier: object = None, user: str | None = LOCAL_USER) -> CalibrationReport:
        return self.trust.calibrate(project, user=user, tier=tier)

    # -- the observation pipeline ---------------------------------------------------------------

    def memory(self, project: str, session_id: str, *, user: str | None = LOCAL_USER) -> ProjectionWithNotes:
        """The session's active memory rendered for injection at compaction (instant, no model call), with
        the candidates a judge found relevant in a labelled section of their own."""
        session_id = check_session_id(session_id)
        projection: Projection = self.pipeline.projection(self.projects.get(project), session_id)
        return self.trust.projection(projection, project, user)

    def memory_version(self, project: str, session_id: str, *, user: str | None = LOCAL_USER) -> str:
        """An opaque token that changes whenever :meth:`memory` would render differently (cheap to read: an
        agent that compacts on every model request renders the memory again only when it changed): the
        session's memories and, for the injected-notes section, the trust state of every tier read."""
        session_id = check_session_id(session_id)
        memories = self.pipeline.projection_version(self.projects.get(project), session_id)
        return f"{memories}/{self.trust.version(project, user)}"

    def session_status(self, project: str, session_id: str) -> SessionStatus:
        """Progress state: idle/observing/reflecting, backlog against the threshold, activity, last error,
        the active generation and the pool's pressure."""
        session_id = check_session_id(session_id)
        return build(SessionStatus, self.pipeline.status(self.projects.get(project), session_id, project))

    def memory_details(self, project: str, session_id: str) -> MemoryDetails:
        """The active memory for inspection: generation, pool pressure, reflections with their supporting
        observations, observations with their coverage tier and source events."""
        session_id = check_session_id(session_id)
        return build(MemoryDetails, self.pipeline.memory_details(self.projects.get(project), session_id))

    def reflect(self, project: str, session_id: str) -> EnqueueResult:
        """Queue a Reflector run over the session's active memory now (below the threshold too)."""
        return self._queue_now(project, session_id, self.pipeline.request_reflection)

    def models(self, project: str) -> ModelChoices:
        """The model each role (observer, reflector, dropper) uses for its next job, and where it comes from."""
        return build(ModelChoices, self.pipeline.models(self.projects.get(project)))

    def route_model(self, project: str, role: str, model: ChatModel | None) -> None:
        """Send a role's model calls (observer, reflector or dropper) for ``project`` to ``model``, from its
        next job on, instead of the configured endpoint; ``None`` returns the role to the settings.

        ``model`` is any :class:`~obsmem.pipeline.ChatModel` (an object with ``complete``); agent
        integrations use it to run the pipeline on their own framework's models. Held in memory by this
        object only: other processes on the same data directory keep their configured models.
        """
        self.pipeline.route_model(project_name(project), role, model)
        self._wake_workers()

    def unroute_model(self, project: str, role: str, model: ChatModel) -> None:
        """Stop sending ``role``'s calls for ``project`` to ``model``, which :meth:`route_model` routed. Agent
        integrations that route the same project's role (two agents' capabilities) each un-route their own:
        the newest model still routed serves the role, and with none left the settings do."""
        self.pipeline.unroute_model(project_name(project), role, model)
        self._wake_workers()

    def switch_models(self, project: str, changes: object) -> ModelSwitch:
        """Switch roles' models at run time: ``{"reflector": {"model_id": "..."}, "dropper": null}``.

        ``null`` returns a role to the settings file. Logged as ``om_model_changed``; used by the next job.
        """
        return build(ModelSwitch, self.pipeline.switch_models(self.projects.get(project), changes))

    def pipeline_events(
        self,
        project: str,
        *,
        after: object = None,
        limit: object = None,
        session_id: str | None = None,
        types: tuple[str, ...] = (),
        newest: bool = False,
    ) -> list[eventlog.LoggedEvent]:
        """The om event log, oldest first, from the event after ``after`` (an event id).

        ``newest`` returns the last ``limit`` events (still oldest first) instead of the first.
        """
        if session_id is not None:
            session_id = check_session_id(session_id)
        start, count = eventlog.parse_after(after), eventlog.parse_list_limit(limit)
        with self.projects.get(project).read() as conn:
            return eventlog.list_events(
                conn, after=start, limit=count, session_id=session_id, types=types, newest=newest
            )

    def event_push(self, project: str) -> EventPush | None:
        """How a follower of the project's event log learns of a new event without reading the log again and
        again: None here (a follower polls its SQLite file); PostgreSQL pushes (LISTEN/NOTIFY)."""
        return None

    def jobs(self, project: str, *, states: tuple[str, ...] = (), limit: int = 100) -> JobList:
        queue = self.pipeline.queue(self.projects.get(project))
        return build(JobList, {"counts": queue.counts(), "jobs": queue.list_jobs(states=states, limit=limit)})

    def index_conversation(self, project: str, *, max_events: int | None = None) -> int:
        """Bring the events' trigram index up to date now (the workers' housekeeping does it in steps; the
        CLI after its writes and ``obsmem index``; the MCP server at start-up), at most ``max_events`` of them
        (None: all); returns the events indexed. Exact conversation search answers the same either way, and
        recall finds an event either way, only faster."""
        return index_event_trigrams(self.projects.get(project), max_events=max_events)

    def conversation_backlog(self, project: str) -> int:
        """Events not in the conversation index yet: exact conversation search and recall scan them directly."""
        with self.projects.get(project).read() as conn:
            return unindexed_events(conn)

    def worker_pool(self) -> WorkerPool:
        """The pool that runs background jobs for every project of this data directory (not started)."""
        if self.workers is None:
            self.workers = WorkerPool(
                self.projects,
                {**self.pipeline.handlers, **self.trust.handlers},
                self.settings.jobs,
                housekeeping=[*self.pipeline.housekeeping_tasks, self.trust.groom_on_schedule, index_conversation_step],
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

    def status(self, project: str) -> ProjectStatus:
        db = self.projects.get(project)
        with db.read() as conn:
            totals = session_totals(conn)
            backlog = unindexed_events(conn)
            kinds = memory_counts(conn)
            generations, dropped = project_generation_totals(conn)
        return build(
            ProjectStatus,
            {
                "project": project,
                "sessions": totals.sessions,
                "events": totals.events,
                "observations": kinds["observation"],
                "reflections": kinds["reflection"],
                "last_activity": totals.last_activity,
                "database_bytes": db.path.stat().st_size,
                "wal_bytes": db.wal_bytes(),
                "mode": self.default_mode,
                "dropped_observations": dropped,
                "generations": generations,
                "observer": self.pipeline.observe.state_for(project),
                "reflector": self.pipeline.reflect.state_for(project),
                "jobs": self.pipeline.queue(db).counts(),
                "unindexed_events": backlog,
                "trust": build(TrustStatus, self.trust.status(project, db)),
            }
            | self._index_status(project),
        )

    def _index_status(self, project: str) -> dict[str, Any]:
        if self.indexer is None:
            return {}
        detail = self.indexer.project(project).status()
        return {
            "indexed_count": detail["indexed_count"],
            "source_count": detail["source_count"],
            "index": detail,
        }

    def project_names(self) -> list[str]:
        return self.projects.names()

    def database(self, project: str, *, create: bool = False) -> ProjectDatabase:
        return self.projects.get(project, create=create)

    def user_tier_names(self) -> list[str]:
        """The owners who have a user tier of notes."""
        return self.trust.user_tier_names()

    def upgrade_user_tier(self, owner: str) -> None:
        """Apply the schema migrations an owner's user tier lacks, as opening a project does for a project."""
        self.trust.upgrade_user_tier(owner)

    def release(self, project: str) -> None:
        """Free what an open project holds (connections, in-memory index); its next use opens it again."""
        if self.indexer is not None:
            self.indexer.release(project)
        self.projects.release(project)

    def close(self) -> None:
        self.stop_workers()
        self.trust.close()
        self.pipeline.close()
        if self.indexer is not None:
            self.indexer.close()
        if self.reranker is not None:
            self.reranker.close()
        self.projects.close()

    def __enter__(self) -> Obsmem:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
