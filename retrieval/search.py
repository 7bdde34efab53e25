"""``memory_search``: validate a request once, then run it in the mode it asks for.

:class:`SearchModes` is the one place that decides how a search runs: which mode a request without one
gets, which searcher answers each mode, and whether a search may run inline on an event loop's thread.
The application floor and the surfaces ask it; none of them compares mode names themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from obsmem.dates import DateWindow, parse_window
from obsmem.errors import ValidationFailed
from obsmem.retrieval.exact import ExactSearcher, validate_query
from obsmem.retrieval.results import SearchResult
from obsmem.settings import SearchSettings
from obsmem.storage import ProjectDatabase
from obsmem.validation import session_id as check_session_id

if TYPE_CHECKING:
    from obsmem.retrieval.hybrid import HybridSearcher

Mode = Literal["exact", "hybrid"]
MODES: tuple[str, ...] = ("exact", "hybrid")


@dataclass(frozen=True)
class SearchRequest:
    """A validated search request."""

    query: str
    window: DateWindow
    limit: int
    mode: str
    session_id: str | None

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
        return cls(needle, window, count, str(chosen), sid)


def run_exact(searcher: ExactSearcher, request: SearchRequest) -> SearchResult:
    hits, truncated = searcher.search(request.query, request.window, request.limit, request.session_id)
    return SearchResult(mode="exact", hits=hits, truncated=truncated, partial=False)


class SearchModes:
    """Mode dispatch: ``hybrid`` when a hybrid searcher was built (semantic mode on), else ``exact``."""

    def __init__(self, hybrid: HybridSearcher | None) -> None:
        self.hybrid = hybrid

    @property
    def default_mode(self) -> str:
        """The mode of a request that names none (tool descriptions follow it)."""
        return "hybrid" if self.hybrid is not None else "exact"

    def runs_inline(self, mode: str | None) -> bool:
        """May a search in ``mode`` (None: the default) run on an event loop's own thread?

        An exact search is an indexed SQLite read of about a millisecond, cheaper than a hop through a
        thread pool (docs/benchmarks.md, "HTTP"); a hybrid search embeds the query and may rerank, so it
        runs in a thread.
        """
        return (mode or self.default_mode) == "exact"

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
            return run_exact(ExactSearcher(conn), request)
