"""``Obsmem`` over the PostgreSQL backend: what is ported answers, everything else refuses by name.

``Obsmem(settings)`` with ``[storage] backend = "postgres"`` builds a :class:`PostgresObsmem`. It answers
through the same owning modules as the SQLite service (events, memories, recall, the importers, export and
restore) and PostgreSQL's exact searcher, with the trust floor's notes over the store's project schemas and
user-tier schemas; every public method of :class:`~obsmem.app.service.Obsmem` it does not list in :data:`PORTED`
raises :class:`~obsmem.errors.NotOnPostgres` naming the method, so a caller learns at once what the backend
lacks (docs/postgres.md), never getting a silent fallback or an answer from somewhere else. Settings that
would switch on work the backend cannot do yet (hybrid search, background observation) are refused when
the service is built.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from obsmem.app.results import Forgotten, JobList, ProjectStatus, Recollection, TrustStatus
from obsmem.app.service import Obsmem
from obsmem.app.typed import build
from obsmem.errors import NotFound, NotOnPostgres
from obsmem.events import AppendReceipt, PreparedEvent, append_events, append_prepared, session_totals
from obsmem.importing import ImportProgress, ImportReceipt, append_transcript, read_transcript
from obsmem.memories import WriteReceipt, add_observations, delete_memory, memory_counts
from obsmem.retrieval import RecalledEvent, SearchModes, SearchResult, find_memory_row, recall_any
from obsmem.settings import Settings, load_settings
from obsmem.storage import EventSignal, PostgresProjectDatabase, PostgresStore
from obsmem.trust import LOCAL_USER, RecalledNote, TierStores, TrustService
from obsmem.validation import project_name
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
    }
)

# How often a follower reads the log while no listening connection works (the SQLite poll's order).
LISTENER_LOST_POLL_SECONDS = 0.25

# Attributes the SQLite service builds that have no PostgreSQL counterpart yet.
_PARTS = frozenset({"pipeline"})


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
        self.search_modes = SearchModes(None)
        # No background work, index or reranker on PostgreSQL yet.
        self.workers = None
        self.indexer = None
        self.hybrid = None
        self.reranker = None
        self.store = PostgresStore(settings.storage.postgres_dsn(), pool_size=settings.storage.pool_size)
        # The store answers the registry calls the shared code makes of ``projects`` (get, exists, names,
        # release), so export, restore, the transcript importer and the trust floor run on it unchanged.
        self.projects = self.store  # type: ignore[assignment]
        stores = TierStores(self.store, self.store.user_tiers())  # type: ignore[arg-type]
        self.trust = TrustService(settings, self.store, self._wake_workers, stores=stores)  # type: ignore[arg-type]

    def append_events(self, project: str, session_id: str, events: list[Any]) -> AppendReceipt:
        """Store events (idempotent per ``(session_id, seq)``); nothing is observed on PostgreSQL yet."""
        # The owning modules are annotated with the SQLite types; the PostgreSQL ones answer the same calls.
        return append_events(self.store.get(project, create=True), session_id, events)  # type: ignore[arg-type]

    def append_prepared_events(
        self, project: str, session_id: str, events: list[PreparedEvent], seqs: list[int | None] | None = None
    ) -> AppendReceipt:
        """Events already validated and redacted (the transcript importer's); nothing is observed here yet."""
        session_id = check_session_id(session_id)
        return append_prepared(self.store.get(project, create=True), session_id, events, seqs=seqs)  # type: ignore[arg-type]

    def import_jsonl(
        self, project: str, path: Path | str, session_id: str | None = None, *, progress: ImportProgress | None = None
    ) -> ImportReceipt:
        """A JSONL transcript, validated whole before the project is opened (as on SQLite)."""
        project_name(project)
        parsed = read_transcript(Path(path), session_id, progress)
        return append_transcript(self.store.get(project, create=True), parsed, progress)  # type: ignore[arg-type]

    def add_observations(self, project: str, observations: list[Any]) -> WriteReceipt:
        db = self.store.get(project) if self.store.exists(project) else None
        return add_observations(db, observations)  # type: ignore[arg-type]

    def forget(self, project: str, memory_id: object, *, session_id: str | None = None) -> Forgotten:
        with self.store.get(project).write() as conn:
            row_id, hit, _ = find_memory_row(conn, memory_id, session_id=session_id, project=project)  # type: ignore[arg-type]
            delete_memory(conn, row_id)  # type: ignore[arg-type]
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
        """Exact search of the memories, with the notes the query finds merged in (as on SQLite)."""
        request = self._search_request(query, after, before, limit, mode, session_id, scope)
        level = self.trust.trust_level(trust)
        result = self.search_modes.run(self.store.get(project), project, request)  # type: ignore[arg-type]
        return self.trust.search(result, project, request, level, user)

    def recall(
        self, project: str, memory_id: object, *, session_id: str | None = None, user: str | None = None
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
                "trust": build(TrustStatus, self.trust.status(project, db)),  # type: ignore[arg-type]
            },
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
        self.trust.close()
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
    if settings.semantic_enabled:
        raise NotOnPostgres("hybrid search ([semantic]) is not available on PostgreSQL yet; remove [semantic]")
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
