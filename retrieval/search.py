"""``memory_search``: validate a request once, then run it in the mode it asks for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from obsmem.retrieval.exact import ExactSearcher, validate_query
from obsmem.retrieval.results import SearchResult

from obsmem.dates import DateWindow, parse_window
from obsmem.errors import ValidationFailed
from obsmem.settings import SearchSettings
from obsmem.validation import session_id as check_session_id

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
