"""Retrieval: exact and hybrid memory search, recall with provenance, result shaping.

The names below are what other layers (the app floor, the eval harness, the surfaces) may import; the
modules inside are internal and may move. The exact-mode names load with the package; the hybrid-mode
names (which pull in numpy, hnswlib and the indexer) load on first use, so a process that only searches
exactly never pays for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

from obsmem.retrieval.exact import MAX_QUERY_CHARS
from obsmem.retrieval.recall import find_memory_row, recall_any
from obsmem.retrieval.recall import recall as recall_memory
from obsmem.retrieval.results import (
    Hit,
    RecalledEvent,
    RecalledMemory,
    RecallParts,
    SearchResult,
    SourceEvent,
    SourceRef,
)
from obsmem.retrieval.search import MODES, SCOPES, SearchModes, SearchRequest

if TYPE_CHECKING:
    from obsmem.retrieval.bm25 import query_terms, query_words
    from obsmem.retrieval.fusion import NO_EVIDENCE
    from obsmem.retrieval.hybrid import HybridSearcher, SearchPlan, StageRankings
    from obsmem.retrieval.hybrid_postgres import PostgresHybridSearcher
    from obsmem.retrieval.rerank import Reranker, make_reranker

# Loaded on first use (lazy_loader): submodule -> the names it defines.
__getattr__, __dir__, _ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "hybrid": ["HybridSearcher", "SearchPlan", "StageRankings"],
        "hybrid_postgres": ["PostgresHybridSearcher"],
        "rerank": ["Reranker", "make_reranker"],
        "bm25": ["query_terms", "query_words"],
        "fusion": ["NO_EVIDENCE"],
    },
)


__all__ = [
    "MAX_QUERY_CHARS",
    "MODES",
    "NO_EVIDENCE",
    "PostgresHybridSearcher",
    "SCOPES",
    "Hit",
    "HybridSearcher",
    "RecallParts",
    "RecalledEvent",
    "RecalledMemory",
    "Reranker",
    "SearchModes",
    "SearchPlan",
    "SearchRequest",
    "SearchResult",
    "SourceEvent",
    "SourceRef",
    "StageRankings",
    "find_memory_row",
    "make_reranker",
    "query_terms",
    "query_words",
    "recall_any",
    "recall_memory",
]
