"""``Obsmem`` over the PostgreSQL backend: what is ported answers, everything else refuses by name.

``Obsmem(settings)`` with ``[storage] backend = "postgres"`` builds a :class:`PostgresObsmem`. It answers
through the same owning modules as the SQLite service (events, memories, recall, the importers, export and
restore) and PostgreSQL's exact searcher, with the trust floor's notes over the store's project schemas and
user-tier schemas; every public method of :class:`~obsmem.app.service.Obsmem` it does not list in :data:`PORTED`
raises :class:`~obsmem.errors.NotOnPostgres` naming the method, so a caller learns at once what the backend
lacks (docs/postgres.md), never getting a silent fallback or an answer from somewhere else. Settings that
would switch on work the backend cannot do (the trigram keyword tokenizer) are refused when the service is
built. Hybrid search runs on PostgreSQL with its index in the database (indexer/postgres.py,
retrieval/hybrid_postgres.py), shared by every server on it, over memories and, with
``semantic.index.events``, conversation events (indexer/postgres_events.py).

The observation pipeline runs here as on SQLite: the same :class:`~obsmem.pipeline.ObservationPipeline`
(append hook, observe and reflect jobs, housekeeping, the projection and the views) over the store's
project schemas, and the same :class:`~obsmem.work.WorkerPool`, whose claims take rows ``FOR UPDATE SKIP
LOCKED``: any number of ``obsmem serve`` and ``obsmem worker`` processes share one database.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from obsmem.app.results import (
    Forgotten,
    JobList,
    ProjectStatus,
    Recollection,
    TrustStatus,
)
from obsmem.app.service import Obsmem
from obsmem.app.typed import build
from obsmem.errors import NotFound, NotOnPostgres
from obsmem.events import session_totals
from obsmem.memories import WriteReceipt, add_observations, delete_memory, memory_counts
from obsmem.pipeline import ObservationPipeline, project_generation_totals
from obsmem.retrieval import RecalledEvent, SearchModes, find_memory_row, recall_any
from obsmem.settings import Settings, home_expanded, load_settings
from obsmem.storage import EventSignal, PostgresProjectDatabase, PostgresStore
from obsmem.transcripts import IMPORT_MARKS_DIR, UnsavedWatermarks
from obsmem.trust import LOCAL_USER, RecalledNote, TierStores, TrustService
from obsmem.validation import session_id as check_session_id
from obsmem.work import WorkerPool, eventlog

# What answers on PostgreSQL today; every other public method of Obsmem refuses (see refuse_unported).
PORTED = frozenset(
    {
        "append_events",
        "add_observations",
        "forget",
        "search",
        "recall",
        "status",
        "project_names",
        "index_conversation",
        "conversation_backlog",
        "pipeline_events",
        "event_push",
        "jobs",
        "start_workers",
        "stop_workers",
        "default_mode",
        "close",
        # The observation pipeline and its workers.
        "observe",
        "reflect",
        "memory",
        "memory_version",
        "session_status",
        "memory_details",
        "models",
        "route_model",
        "unroute_model",
        "switch_models",
        "worker_pool",
        # notes and trust (the user tier in a schema of its own), imports, export and restore
        "save_note",
        "update_note",
        "forget_note",
        "notes",
        "judgments",
        "resolve_judgment",
        "groom",
        "calibrate_trust",
        "append_prepared_events",
        "import_jsonl",
        "import_transcripts",
        "import_observations",
        "database",
        "release",
        "user_tier_names",
        "upgrade_user_tier",
        # Hybrid search and its index (docs/postgres.md): memories, and events with semantic.index.events.
        "index",
        "search_stages",
    }
)

# How often a follower reads the log while no listening connection works (the SQLite poll's order).
LISTENER_LOST_POLL_SECONDS = 0.25


class PostgresObsmem(Obsmem):
    """Memory for every project in one PostgreSQL database (built by ``Obsmem`` for that backend)."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        data_dir: Path | str | None = None,
        background_indexing: bool | None = None,
    ) -> None:
        if settings is None:
            settings = load_settings(data_dir=data_dir)
        refuse_unported_settings(settings)
        self.settings = settings
        self.workers: WorkerPool | None = None
        self.indexer = None
        self.hybrid = None
        self.reranker = None
        self.store = PostgresStore(settings.storage.postgres_dsn(), pool_size=settings.storage.pool_size)
        self.pipeline = ObservationPipeline(settings)
        # The store answers the registry calls the shared code makes of ``projects`` (get, exists, names,
        # release), so export, restore, the transcript importer and the trust floor run on it unchanged.
        self.projects = self.store  # type: ignore[assignment]
        stores = TierStores(self.store, self.store.user_tiers())  # type: ignore[arg-type]
        self.trust = TrustService(settings, self.store, self._wake_workers, stores=stores)  # type: ignore[arg-type]
        if settings.semantic is not None and settings.semantic.enabled:
            # The index lives in the database (pgvector, postings), so every server on it shares one.
            from obsmem.indexer import PostgresSemanticIndexer
            from obsmem.retrieval import PostgresHybridSearcher, make_reranker

            self.indexer = PostgresSemanticIndexer(settings.semantic, self.store)  # type: ignore[arg-type]
            self.reranker = make_reranker(settings.semantic.reranker)
            self.hybrid = PostgresHybridSearcher(self.indexer, settings.semantic, self.reranker)
            background = settings.semantic.index.background if background_indexing is None else background_indexing
            if background:
                self.indexer.start_background()
        self.search_modes = SearchModes(self.hybrid)
        # Watermarks of transcripts that stored nothing in a project not made yet (see UnsavedWatermarks):
        # they name this machine's files, so they are kept in its data directory, as on SQLite.
        data_dir = home_expanded(settings.data_dir, "data directory").resolve()
        self._unsaved_watermarks = UnsavedWatermarks(data_dir / IMPORT_MARKS_DIR)

    def _db(self, project: str) -> Any:
        """The project's schema, typed loosely: the pipeline's modules are annotated with the SQLite types,
        and the PostgreSQL database answers the same calls."""
        return self.store.get(project)

    def worker_pool(self) -> WorkerPool:
        """The pool that runs the pipeline's and the trust floor's jobs for every project in the database (not
        started); the events' trigram index is kept by the append, so it needs no catch-up task."""
        if self.workers is None:
            self.workers = WorkerPool(
                self.store,  # type: ignore[arg-type]
                {**self.pipeline.handlers, **self.trust.handlers},
                self.settings.jobs,
                housekeeping=[*self.pipeline.housekeeping_tasks, self.trust.groom_on_schedule],
            )
        return self.workers

    def add_observations(self, project: str, observations: list[Any]) -> WriteReceipt:
        db = self.store.get(project) if self.store.exists(project) else None
        receipt = add_observations(db, observations)  # type: ignore[arg-type]
        if receipt.added:
            self._memories_changed(project)
        return receipt

    def forget(self, project: str, memory_id: object, *, session_id: str | None = None) -> Forgotten:
        with self.store.get(project).write() as conn:
            row_id, hit, _ = find_memory_row(conn, memory_id, session_id=session_id, project=project)  # type: ignore[arg-type]
            delete_memory(conn, row_id)  # type: ignore[arg-type]
        self._memories_changed(project)
        return Forgotten(deleted=hit)

    def _searched(self, project: str) -> Any:
        """The project schema a search reads (the store's, where SQLite opens a project database)."""
        return self.store.get(project)

    def recall(
        self, project: str, memory_id: object, *, session_id: str | None = None, user: str | None = LOCAL_USER
    ) -> Recollection | RecalledEvent | RecalledNote:
        neighbours = self.settings.search.recall_neighbours
        try:
            with self.store.get(project).read() as conn:
                parts = recall_any(conn, memory_id, session_id=session_id, project=project, neighbours=neighbours)  # type: ignore[arg-type]
        except NotFound:
            note = self.trust.recall_note(project, str(memory_id), user)
            if note is None:
                raise
            return note
        if isinstance(parts, RecalledEvent):
            return parts
        return Recollection(memory=parts.memory, sources=parts.sources, supporting=parts.supporting)

    def status(self, project: str) -> ProjectStatus:
        """Counts and sizes, the pipeline's generations and its states, and the semantic index's figures, as
        on SQLite. ``unindexed_events`` (the exact search's catch-up backlog on SQLite) is always 0: the
        events' trigram index is kept by the append; events waiting for the semantic index count in
        ``index.pending``."""
        db: PostgresProjectDatabase = self.store.get(project)
        with db.read() as conn:
            totals = session_totals(conn)  # type: ignore[arg-type]
            kinds = memory_counts(conn)  # type: ignore[arg-type]
            generations, dropped = project_generation_totals(conn)  # type: ignore[arg-type]
            size_row = conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class AS c"
                " JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE n.nspname = ? AND c.relkind = 'r'",
                (db.schema,),
            ).fetchone()
        size = size_row[0] if size_row is not None else 0
        return build(
            ProjectStatus,
            {
                "project": project,
                "sessions": totals.sessions,
                "events": totals.events,
                "observations": kinds["observation"],
                "reflections": kinds["reflection"],
                "last_activity": totals.last_activity,
                "database_bytes": int(size),
                "wal_bytes": 0,
                "mode": self.default_mode,
                "dropped_observations": dropped,
                "generations": generations,
                "observer": self.pipeline.observe.state_for(project),
                "reflector": self.pipeline.reflect.state_for(project),
                "jobs": self.pipeline.queue(db).counts(),  # type: ignore[arg-type]
                "unindexed_events": 0,
                "trust": build(TrustStatus, self.trust.status(project, db)),  # type: ignore[arg-type]
            }
            | self._index_status(project),
        )

    def index_conversation(self, project: str, *, max_events: int | None = None) -> int:
        """Nothing to catch up: PostgreSQL's trigram index on events is kept by the append itself."""
        self.store.get(project)
        return 0

    def conversation_backlog(self, project: str) -> int:
        self.store.get(project)
        return 0

    def project_names(self) -> list[str]:
        return self.store.names()

    def database(self, project: str, *, create: bool = False) -> PostgresProjectDatabase:  # type: ignore[override]
        return self.store.get(project, create=create)

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
        """The om event log, oldest first, from the event after ``after`` (as on SQLite)."""
        if session_id is not None:
            session_id = check_session_id(session_id)
        start, count = eventlog.parse_after(after), eventlog.parse_list_limit(limit)
        with self.store.get(project).read() as conn:
            return eventlog.list_events(
                conn,  # type: ignore[arg-type]
                after=start,
                limit=count,
                session_id=session_id,
                types=types,
                newest=newest,
            )

    def event_push(self, project: str) -> SchemaEventPush:
        """Followers wait on the store's LISTEN connection: an event recorded through any server on this
        database wakes them at its commit (``NOTIFY`` with the project's schema)."""
        db = self.store.get(project)
        return SchemaEventPush(self.store.event_signal(), db.schema)

    def jobs(self, project: str, *, states: tuple[str, ...] = (), limit: int = 100) -> JobList:
        queue = self.pipeline.queue(self._db(project))
        return build(JobList, {"counts": queue.counts(), "jobs": queue.list_jobs(states=states, limit=limit)})

    def close(self) -> None:
        self.stop_workers()
        self.trust.close()
        self.pipeline.close()
        if self.indexer is not None:
            self.indexer.close()
        if self.reranker is not None:
            self.reranker.close()
        self.store.close()

    def __enter__(self) -> PostgresObsmem:
        return self


class SchemaEventPush:
    """The :class:`~obsmem.app.service.EventPush` of one project schema on PostgreSQL."""

    def __init__(self, signal: EventSignal, schema: str) -> None:
        self._signal = signal
        self._schema = schema

    def token(self) -> int:
        return self._signal.version(self._schema)

    async def wait(self, token: int, timeout: float) -> bool:
        if not self._signal.listening:
            # The listening connection broke: the follower reads again after a short pause (a poll) until the
            # next follower's event_push opens a new one.
            await asyncio.sleep(min(timeout, LISTENER_LOST_POLL_SECONDS))
            return True
        return await self._signal.wait_async(self._schema, token, timeout)


def refuse_unported_settings(settings: Settings) -> None:
    """Refuse settings that ask for work the PostgreSQL backend cannot do, before anything opens."""
    semantic = settings.semantic if settings.semantic_enabled else None
    if semantic is not None and semantic.bm25.tokenizer.split()[0] == "trigram":
        raise NotOnPostgres(
            "the trigram keyword tokenizer is not available on PostgreSQL; use a word tokenizer ([semantic.bm25])"
        )


def _refusal(name: str) -> Callable[..., NoReturn]:
    def refuse(self: PostgresObsmem, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotOnPostgres(f"{name} is not available on PostgreSQL yet (see docs/postgres.md)")

    functools.update_wrapper(refuse, getattr(Obsmem, name))
    return refuse


def refuse_unported() -> list[str]:
    """Replace every public method of Obsmem that PostgresObsmem does not port with a refusal; returns them."""
    refused = []
    for name, member in vars(Obsmem).items():
        if name.startswith("_") or name in PORTED or not callable(member):
            continue
        setattr(PostgresObsmem, name, _refusal(name))
        refused.append(name)
    return refused


REFUSED = tuple(refuse_unported())
