"""``memory_search``: validate a request once, then run it in the mode it asks for.

:class:`SearchModes` is the one place that decides how a search runs: which mode a request without one
gets, which searcher answers each mode, and whether a search may run inline on an event loop's thread.
The application floor and the surfaces ask it; none of them compares mode names themselves.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import apsw

from obsmem.dates import DateWindow, parse_window
from obsmem.errors import InvalidScope, ValidationFailed
from obsmem.retrieval.corpus import EVENTS, MEMORIES, Corpus
from obsmem.retrieval.exact import ExactSearcher, validate_query
from obsmem.retrieval.results import Hit, SearchResult
from obsmem.settings import SearchSettings
from obsmem.storage import ProjectDatabase, sql_dialect
from obsmem.validation import session_id as check_session_id

if TYPE_CHECKING:
    from obsmem.retrieval.hybrid import HybridSearcher

Mode = Literal["exact", "hybrid"]
MODES: tuple[str, ...] = ("exact", "hybrid")
Scope = Literal["memories", "conversation", "all"]
# What a search looks in: memories (observations and reflections; the default), the conversation's
# events, or both.
SCOPES: tuple[str, ...] = ("memories", "conversation", "all")
DEFAULT_SCOPE = "memories"
_CORPORA: dict[str, tuple[Corpus, ...]] = {
    "memories": (MEMORIES,),
    "conversation": (EVENTS,),
    "all": (MEMORIES, EVENTS),
}


def parse_scope(scope: object) -> str:
    """``memories`` (None), ``conversation`` or ``all``; anything else is ``invalid_scope``."""
    if scope is None:
        return DEFAULT_SCOPE
    if not isinstance(scope, str) or scope not in SCOPES:
        raise InvalidScope("scope must be 'memories', 'conversation' or 'all'", field="scope")
    return scope


@dataclass(frozen=True)
class SearchRequest:
    """A validated search request."""

    query: str
    window: DateWindow
    limit: int
    mode: str
    session_id: str | None
    scope: str = DEFAULT_SCOPE

    @classmethod
    def parse(
        cls,
        *,
        query: object,
        after: object = None,
        before: object = None,
        limit: object = None,
        mode: object = None,
        session_id: object = None,
        scope: object = None,
        default_mode: str = "exact",
        limits: SearchSettings | None = None,
    ) -> SearchRequest:
        limits = limits or SearchSettings()
        needle = validate_query(query)
        window = parse_window(after, before)
        if limit is None:
            count = limits.default_limit
        elif isinstance(limit, bool) or not isinstance(limit, int):
            raise ValidationFailed("limit must be an integer", field="limit")
        elif not 1 <= limit <= limits.max_limit:
            raise ValidationFailed(f"limit must be between 1 and {limits.max_limit}", field="limit")
        else:
            count = limit
        chosen = default_mode if mode is None else mode
        if chosen not in MODES:
            raise ValidationFailed("mode must be 'exact' or 'hybrid'", field="mode")
        sid = None if session_id is None else check_session_id(session_id)
        return cls(needle, window, count, str(chosen), sid, parse_scope(scope))


def run_exact(searchers: list[ExactSearcher], request: SearchRequest) -> SearchResult:
    """Each corpus's newest ``limit + 1`` matches, merged newest first: the first ``limit`` of the merge
    are the newest of all, and more than ``limit`` in it means more matched (``truncated``)."""
    fetch = request.limit + 1
    found = [searcher.rows(request.query, request.window, fetch, request.session_id) for searcher in searchers]
    # Column 3 is the stored date in both corpora; a stable merge keeps each corpus's own order on ties.
    rows = found[0] if len(found) == 1 else list(heapq.merge(*found, key=lambda row: row[3], reverse=True))
    hits = [Hit.from_row(row) for row in rows[: request.limit]]
    return SearchResult(mode="exact", hits=hits, truncated=len(rows) > request.limit, partial=False)


def exact_searchers(conn: apsw.Connection, scope: str) -> list[ExactSearcher]:
    """One exact searcher per corpus the scope covers, on one connection."""
    if sql_dialect(conn) == "postgres":
        from obsmem.retrieval.exact_postgres import PostgresExactSearcher

        return [PostgresExactSearcher(conn, corpus=corpus) for corpus in _CORPORA[scope]]  # type: ignore[misc]
    return [ExactSearcher(conn, corpus=corpus) for corpus in _CORPORA[scope]]


class SearchModes:
    """Mode dispatch: ``hybrid`` when a hybrid searcher was built (semantic mode on), else ``exact``."""

    def __init__(self, hybrid: HybridSearcher | None) -> None:
        self.hybrid = hybrid

    @property
    def default_mode(self) -> str:
        """The mode of a request that names none (tool descriptions follow it)."""
        return "hybrid" if self.hybrid is not None else "exact"

    def runs_inline(self, mode: str | None, scope: str | None = None) -> bool:
        """May a search in ``mode`` and ``scope`` (None: the defaults) run on an event loop's own thread?

        Only an exact search of the memories: an indexed SQLite read of about a millisecond over lines of at
        most 4,000 characters, cheaper than a hop through a thread pool (docs/benchmarks.md, "HTTP"). A
        search of the conversation reads events, which can hold a tool's whole output, and checks the events
        not indexed yet one by one, so its cost grows with them; a hybrid search embeds the query and may
        rerank. Both run in a thread, where they hold up no other request.
        """
        return (mode or self.default_mode) == "exact" and (scope or DEFAULT_SCOPE) == "memories"

    def hybrid_searcher(self) -> HybridSearcher:
        """The hybrid searcher, or ``mode_unavailable`` when semantic mode is off."""
        if self.hybrid is None:
            raise ValidationFailed(
                "hybrid mode needs the [semantic] section in the settings file",
                code="mode_unavailable",
                field="mode",
            )
        return self.hybrid

    def run(self, db: ProjectDatabase, project: str, request: SearchRequest) -> SearchResult:
        """Answer a parsed request with the searcher for its mode."""
        if request.mode == "hybrid":
            return self.hybrid_searcher().search(project, request)
        with db.read() as conn:
            return run_exact(exact_searchers(conn, request.scope), request)
