"""Hybrid search on PostgreSQL: the same search as :class:`~obsmem.retrieval.hybrid.HybridSearcher`, with the
vector list from pgvector instead of in-memory vectors.

Everything that decides the ranking is shared: the keyword list (:class:`~obsmem.retrieval.bm25.Bm25List`,
whose BM25 scores the PostgreSQL reader computes with FTS5's formula), validation of every candidate
against the current memory, fusion with the exact cosine of every candidate, neighbour smoothing,
supersession, the relevance floor, the rerank and the collapse to memories. What differs is where the
vectors are: in the database, so the vector list is a query (the HNSW index for an open search, an exact
scan of the window for a filtered one up to ``exact_scan_max_chunks``) and exact cosines and supersession's
embeddings are read from the same snapshot as the lists. The query embedding is made before the snapshot
opens, holding no connection. One count differs: the common words' (retrieval/common_words.py) are exact
here, where SQLite estimates them past ``max_postings``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from obsmem.indexer import Filter, IndexReader, PostgresIndexReader
from obsmem.retrieval.hybrid import MAX_STALE_MARGIN, HybridSearcher, SearchPlan, StageRankings
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
    indexed (scopes ``conversation`` and ``all``, as on SQLite; the scope check is the shared
    :meth:`HybridSearcher._check_scope`).

    One search is one snapshot and a handful of exchanges with the server (the query embedding made
    before it, see :meth:`HybridSearcher._open`, after a short read of its words' counts, which finds its
    common words, :meth:`HybridSearcher.without_common_words`: the state with the chunk total and the
    counts, one statement in a transaction of its own, with no commit to wait
    for): the readiness row with the kinds held, the stale count and the graph's ``ef_search``; the vector
    list's statement with the keyword list's term counts and then its scores (pipelined); the candidates'
    validation with their cosines and their neighbours' positions (pipelined); rarely a validation of
    neighbours that entered the ranking; the commit."""

    def run(
        self, project: str, request: SearchRequest, plan: SearchPlan | None = None, *, rankings: bool = True
    ) -> tuple[SearchResult, StageRankings]:
        plan = plan or SearchPlan()
        stages = StageRankings()
        opening = self._open(project, request, plan)
        if opening is None:
            return SearchResult(mode="hybrid"), stages
        index, kind, query_vector = opening.index, opening.kind, opening.query_vector
        # Candidates are checked against the scope's kind (``scoped``); the lists drop a kind filter that
        # keeps every indexed chunk (``where``), as SQLite's do.
        scoped = Filter(request.window.lower, request.window.upper, request.session_id, kind)
        k = self.settings.fusion.candidates_per_list
        ef_search = self.settings.index.hnsw_ef_search
        vectors: Any = _StoredVectors()
        with index.reader() as store:
            assert isinstance(store, PostgresIndexReader)
            state, stored, partial, chunks, stale = store.readiness(kind, ef_search=max(ef_search, k + 1))
            if self._refused(project, index, store, state, kind, live=stored):
                return SearchResult(mode="hybrid"), stages
            self.check_width(state.dimensions, query_vector)
            where = store.narrowed(scoped)
            # Indexed chunks whose source has changed since (capped): what the lists may lose to validation.
            margin = min(stale, MAX_STALE_MARGIN) if partial else 0
            lists: list[RankedList] = []
            later = None
            if query_vector is not None:
                exact_max = self.settings.index.exact_scan_max_chunks
                later = store.vector_candidates_later(
                    query_vector, k + margin + 1, where, exact_max=exact_max, ef_search=ef_search
                )
            if opening.use_bm25:  # its first statement carries the vector list's
                lists.append(self.bm25.search(store, request.query, k + margin, where, None, chunks))
            if later is not None:
                items = later()
                ranked = RankedList("vector")
                ranked.full = len(items) > k + margin
                ranked.items = items[: k + margin]
                lists.append(ranked)
            labels = {label for ranked in lists for label in ranked.labels}
            valid = store.validate_scored(labels, scoped, query_vector if len(lists) > 1 else None)
            fused, stages.evidence, stages.unknown_names = self._rank_valid(
                store, request.query, lists, valid, vectors, query_vector, scoped, k, index.embedder, state.version
            )
        return self._finish(request, plan, lists, valid, fused, stages, partial=partial, rankings=rankings)

    def _chunks_and_counts(self, index: Any, store: IndexReader, words: list[str]) -> tuple[int, dict[str, int]]:
        """How many chunks the keyword list holds and each of ``words``' exact chunk count (PostgreSQL's
        terms table keeps them, so no count is bounded here), in one statement of its own; its bounded
        counts are cached for the keyword list at the index version that statement read (which a search
        whose snapshot holds another version does not use)."""
        assert isinstance(store, PostgresIndexReader)
        state, chunks, postings, exact = store.state_chunks_and_postings(words, self.settings.bm25.max_postings)
        self.bm25.remember(store, words, postings, state.version)
        return chunks, dict(zip(words, exact, strict=True))

    @staticmethod
    def _cosines(store: IndexReader, vectors: Any, query: np.ndarray, labels: list[int]) -> dict[int, float]:
        """Exact cosines of every candidate, computed by the database from the stored embeddings (read with
        the candidates' validation)."""
        assert isinstance(store, PostgresIndexReader)
        return store.cosines(query, labels)
