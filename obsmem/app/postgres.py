"""``Obsmem`` over the PostgreSQL backend: what is ported answers, everything else refuses by name.

``Obsmem(settings)`` with ``[storage] backend = "postgres"`` builds a :class:`PostgresObsmem`. It answers
through the same owning modules as the SQLite service (events, memories, recall) and PostgreSQL's exact
searcher; every public method of :class:`~obsmem.app.service.Obsmem` it does not list in :data:`PORTED`
raises :class:`~obsmem.errors.NotOnPostgres` naming the method, so a caller learns at once what the backend
lacks (docs/postgres.md), never getting a silent fallback or an answer from somewhere else. Settings that
would switch on work the backend cannot do yet (background observation, indexing conversation events) are
refused when the service is built. Hybrid search runs on PostgreSQL with its index in the database
(indexer/postgres.py, retrieval/hybrid_postgres.py).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from obsmem.app.results import Forgotten, JobList, ProjectStatus, Recollection
from obsmem.app.service import Obsmem
from obsmem.app.typed import build
from obsmem.errors import NotOnPostgres
from obsmem.events import AppendReceipt, append_events, session_totals
from obsmem.memories import WriteReceipt, add_observations, delete_memory, memory_counts
from obsmem.retrieval import RecalledEvent, SearchModes, SearchResult, find_memory_row, recall_any
from obsmem.settings import Settings, load_settings
from obsmem.storage import EventSignal, PostgresProjectDatabase, PostgresStore
from obsmem.trust import LOCAL_USER
from obsmem.validation import session_id as check_session_id
from obsmem.work import JobQueue, eventlog

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
        # Hybrid search and its index (docs/postgres.md): memories only.
        "index",
        "search_stages",
        # The project's PostgreSQL database, which the owning modules' functions accept (the eval harness
        # loads its datasets through it).
        "database",
    }
)

# How often a follower reads the log while no listening connection works (the SQLite poll's order).
LISTENER_LOST_POLL_SECONDS = 0.25

# Attributes the SQLite service builds that have no PostgreSQL counterpart yet.
_PARTS = frozenset({"pipeline", "projects", "trust"})


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
        # No background workers on PostgreSQL yet.
        self.workers = None
        self.indexer = None
        self.hybrid = None
        self.reranker = None
        self.store = PostgresStore(settings.storage.postgres_dsn(), pool_size=settings.storage.pool_size)
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

    def append_events(self, project: str, session_id: str, events: list[Any]) -> AppendReceipt:
        """Store events (idempotent per ``(session_id, seq)``); nothing is observed on PostgreSQL yet."""
        # The owning modules are annotated with the SQLite types; the PostgreSQL ones answer the same calls.
        return append_events(self.store.get(project, create=True), session_id, events)  # type: ignore[arg-type]

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
        """Exact or hybrid search of the memories (exact of the conversation too). Notes cannot be written on
        PostgreSQL yet, so none are merged (there are none to find); asking for a trust level other than the
        default is refused."""
        request = self._search_request(query, after, before, limit, mode, session_id, scope)
        if trust not in (None, "trusted"):
            raise NotOnPostgres("notes (search trust levels) are not available on PostgreSQL yet", field="trust")
        return self.search_modes.run(self.store.get(project), project, request)  # type: ignore[arg-type]

    def recall(
        self, project: str, memory_id: object, *, session_id: str | None = None, user: str | None = None
    ) -> Recollection | RecalledEvent:
        # Notes are not on PostgreSQL yet, so ``user`` (whose notes tier a note id may name) changes nothing.
        neighbours = self.settings.search.recall_neighbours
        with self.store.get(project).read() as conn:
            parts = recall_any(conn, memory_id, session_id=session_id, project=project, neighbours=neighbours)  # type: ignore[arg-type]
        if isinstance(parts, RecalledEvent):
            return parts
        return Recollection(memory=parts.memory, sources=parts.sources, supporting=parts.supporting)

    def status(self, project: str) -> ProjectStatus:
        """Counts and sizes. No pipeline or index runs on PostgreSQL yet: generations and dropped observations
        read 0, and the observer and reflector say ``disabled`` or ``not_configured``, as they are."""
        db: PostgresProjectDatabase = self.store.get(project)
        with db.read() as conn:
            totals = session_totals(conn)  # type: ignore[arg-type]
            kinds = memory_counts(conn)  # type: ignore[arg-type]
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
                "dropped_observations": 0,
                "generations": 0,
                "observer": "disabled" if not self.settings.observer.enabled else "not_configured",
                "reflector": "disabled" if not self.settings.reflector.enabled else "not_configured",
                "jobs": JobQueue(db).counts(),  # type: ignore[arg-type]
                "unindexed_events": 0,
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
        queue = JobQueue(self.store.get(project))  # type: ignore[arg-type]
        return build(JobList, {"counts": queue.counts(), "jobs": queue.list_jobs(states=states, limit=limit)})

    def __getattr__(self, name: str) -> NoReturn:
        # The SQLite service's parts (pipeline, project registry, trust service) do not exist here: a caller
        # reaching for one learns which, instead of meeting an AttributeError deep inside.
        if name in _PARTS:
            raise NotOnPostgres(f"the {name} part of obsmem is not available on PostgreSQL yet (see docs/postgres.md)")
        raise AttributeError(name)

    def start_workers(self, *, threads: int | None = None, housekeeping: bool = True) -> NoReturn:
        """Refused: no background work runs on PostgreSQL yet. ``obsmem serve`` starts workers unless
        ``[jobs] in_server = false``, so the message says how to serve without them."""
        raise NotOnPostgres(
            "background workers are not available on PostgreSQL yet; set [jobs] in_server = false to serve "
            "without them (see docs/postgres.md)"
        )

    def stop_workers(self, timeout: float = 10.0) -> None:
        """No workers run on PostgreSQL (``start_workers`` refuses), so there is nothing to stop."""

    def close(self) -> None:
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
    """Refuse settings that ask for work the PostgreSQL backend cannot do yet, before anything opens."""
    if settings.semantic_enabled and settings.semantic is not None:
        if settings.semantic.index.events:
            raise NotOnPostgres(
                "hybrid search of conversation events (semantic.index.events) is not available on PostgreSQL yet; "
                "set it to false (exact conversation search works)"
            )
        if settings.semantic.bm25.tokenizer.split()[0] == "trigram":
            raise NotOnPostgres(
                "the trigram keyword tokenizer is not available on PostgreSQL; use a word tokenizer ([semantic.bm25])"
            )
    for role in ("observer", "reflector"):
        section = getattr(settings, role)
        model = settings.model_for(role)
        if section.enabled and model.base_url and model.model_id:
            raise NotOnPostgres(
                f"the background pipeline ([{role}] with a model) is not available on PostgreSQL yet; "
                f"set {role}.enabled = false or configure no model"
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
