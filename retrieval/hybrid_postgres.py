"""Hybrid search on PostgreSQL: the same search as :class:`~obsmem.retrieval.hybrid.HybridSearcher`, with the
vector list from pgvector instead of in-memory vectors.

Everything that decides the ranking is shared: the keyword list (:class:`~obsmem.retrieval.bm25.Bm25List`,
whose BM25 scores the PostgreSQL reader computes with FTS5's formula), validation of every candidate
against the current memory, fusion with the exact cosine of every candidate, neighbour smoothing,
supersession, the relevance floor, the rerank and the collapse to memories. What differs is where the
vectors are: in the database, so the vector list is a query (the HNSW index for an open search, an exact
scan of the window for a filtered one up to ``exact_scan_max_chunks``) and exact cosines and supersession's
embeddings are read from the same snapshot as the lists. The query embedding is made before the snapshot
opens, holding no connection.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from obsmem.errors import ValidationFailed
from obsmem.indexer import MEMORY_SOURCES, Filter, IndexReader, PostgresIndexReader
from obsmem.retrieval.hybrid import (
    MAX_STALE_MARGIN,
    SCOPE_KINDS,
    HybridSearcher,
    SearchPlan,
    StageRankings,
)
from obsmem.retrieval.ranked import RankedList
from obsmem.retrieval.results import SearchResult
from obsmem.retrieval.search import SearchRequest


class _StoredVectors:
    """Stands where the in-memory vectors stand in the shared ranking code: it holds none, so every
    cosine and embedding that code asks for is read from the search's snapshot."""

    def similarities(self, query: np.ndarray, labels: list[int]) -> dict[int, float]:
        return {}

    def vectors_of(self, labels: list[int]) -> dict[int, np.ndarray]:
        return {}


class PostgresHybridSearcher(HybridSearcher):
    """Hybrid ``memory_search`` over a project schema: memories, and conversation events when they are
    indexed (scopes ``conversation`` and ``all``, as on SQLite)."""

    def run(
        self, project: str, request: SearchRequest, plan: SearchPlan | None = None, *, rankings: bool = True
    ) -> tuple[SearchResult, StageRankings]:
        plan = plan or SearchPlan()
        stages = StageRankings()
        index = self.indexer.project(project)
        kind = SCOPE_KINDS[request.scope]
        if kind != MEMORY_SOURCES and not index.indexes_events:
            raise ValidationFailed(
                "hybrid search of the conversation needs semantic.index.events = true; use mode 'exact'",
                code="mode_unavailable",
                field="scope",
            )
        with index.reader() as store:
            state = store.state()
            if not state.compatible_with(index.signature, index.keyword_signature) or state.dimensions is None:
                if store.source_count(kind) == 0:
                    return SearchResult(mode="hybrid"), stages
                raise self._building(project, store, compatible=False, kind=kind)
        use_bm25, use_vectors = self._lists(plan)
        query_vector = index.embedder.embed_query(request.query) if use_vectors else None
        # Candidates are checked against the scope's kind (``scoped``); the lists drop a kind filter that
        # keeps every indexed chunk (``where``), as SQLite's do.
        scoped = Filter(request.window.lower, request.window.upper, request.session_id, kind)
        fusion = self.settings.fusion
        k = fusion.candidates_per_list
        vectors: Any = _StoredVectors()
        with index.reader() as store:
            state, stored, partial, chunks = store.readiness(kind)
            where = store.narrowed(scoped)
            if not state.compatible_with(index.signature, index.keyword_signature):
                raise self._building(project, store, compatible=False, kind=kind)
            if not stored:
                if store.source_count(kind) == 0:
                    return SearchResult(mode="hybrid"), stages
                raise self._building(project, store, compatible=True, kind=kind)
            margin = store.stale_chunks(MAX_STALE_MARGIN) if partial else 0
            lists: list[RankedList] = []
            if use_bm25:
                lists.append(self.bm25.search(store, request.query, k + margin, where, None, chunks))
            if query_vector is not None:
                found, _ = store.vector_candidates(
                    query_vector,
                    k + margin + 1,
                    where,
                    exact_max=self.settings.index.exact_scan_max_chunks,
                    ef_search=self.settings.index.hnsw_ef_search,
                )
                ranked = RankedList("vector")
                ranked.full = len(found) > k + margin
                ranked.items = found[: k + margin]
                lists.append(ranked)
            valid = store.validate({label for ranked in lists for label in ranked.labels}, scoped)
            for ranked in lists:
                kept = [item for item in ranked.items if item[0] in valid]
                ranked.full = ranked.full or len(kept) > k
                ranked.items = kept[:k]
            fused, stages.evidence = self.rank(store, lists, valid, vectors, query_vector, scoped)
            if len(lists) > 1:
                fused = self._superseded(request.query, fused, valid, vectors, store)
        return self._finish(request, plan, lists, valid, fused, stages, partial=partial, rankings=rankings)

    @staticmethod
    def _cosines(store: IndexReader, vectors: Any, query: np.ndarray, labels: list[int]) -> dict[int, float]:
        """Exact cosines of every candidate, computed by the database from the stored embeddings."""
        assert isinstance(store, PostgresIndexReader)
        return store.cosines(query, labels)
