"""A search's arguments checked once, in one order, with one set of messages, wherever the search is asked.

:meth:`Obsmem.search` runs :func:`check_search` before it reads anything, and so does the pydantic-ai
capability's remote backend before it posts a search to ``obsmem serve``: a model's mistake then reads the
same in process, over HTTP and over MCP (``invalid_request: limit must be an integer``), rather than in the
words of whichever validator met it first.
"""

from __future__ import annotations

from dataclasses import dataclass

from obsmem.retrieval import SearchRequest
from obsmem.settings import SearchSettings
from obsmem.trust import TrustService


@dataclass(frozen=True)
class CheckedSearch:
    """A search request as validated, and the trust level it asks for (``trusted`` or ``all``)."""

    request: SearchRequest
    trust: str


def check_search(
    query: object,
    *,
    after: object = None,
    before: object = None,
    limit: object = None,
    mode: object = None,
    session_id: object = None,
    scope: object = None,
    trust: object = None,
    default_mode: str = "exact",
    limits: SearchSettings | None = None,
) -> CheckedSearch:
    """The arguments checked (query, dates, limit, mode, session, scope, then trust); raises the first
    error's :class:`~obsmem.errors.ObsmemError`. ``limits`` are the server's search settings (default:
    the defaults, whose ``max_limit`` of 50 is also what the HTTP API accepts at most)."""
    request = SearchRequest.parse(
        query=query,
        after=after,
        before=before,
        limit=limit,
        mode=mode,
        session_id=session_id,
        scope=scope,
        default_mode=default_mode,
        limits=limits,
    )
    return CheckedSearch(request, TrustService.trust_level(trust))
