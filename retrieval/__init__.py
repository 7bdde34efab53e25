"""Retrieval: exact and hybrid memory search, recall with provenance, result shaping.

The names below are what other layers (the app floor, the eval harness, the surfaces) may import; the
modules inside are internal and may move. The exact-mode names load with the package; the hybrid-mode
names (which pull in numpy, hnswlib and the indexer) load on first use, so a process that only searches
exactly never pays for them.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from obsmem.retrieval.exact import MAX_QUERY_CHARS
from obsmem.retrieval.recall import find_memory_row
from obsmem.retrieval.recall import recall as recall_memory
from obsmem.retrieval.results import Hit, SearchResult
from obsmem.retrieval.search import MODES, SearchModes, SearchRequest

if TYPE_CHECKING:
    from obsmem.retrieval.hybrid import HybridSearcher, SearchPlan, StageRankings
    from obsmem.retrieval.rerank import Reranker, make_reranker

# Loaded on first use: name -> the module that defines it.
_ON_FIRST_USE = {
    "HybridSearcher": "obsmem.retrieval.hybrid",
    "SearchPlan": "obsmem.retrieval.hybrid",
    "StageRankings": "obsmem.retrieval.hybrid",
    "Reranker": "obsmem.retrieval.rerank",
    "make_reranker": "obsmem.retrieval.rerank",
}


def __getattr__(name: str) -> Any:
    if name not in _ON_FIRST_USE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_ON_FIRST_USE[name]), name)


__all__ = [
    "MAX_QUERY_CHARS",
    "MODES",
    "Hit",
    "HybridSearcher",
    "Reranker",
    "SearchModes",
    "SearchPlan",
    "SearchRequest",
    "SearchResult",
    "StageRankings",
    "find_memory_row",
    "make_reranker",
    "recall_memory",
]
