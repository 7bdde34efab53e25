"""Hybrid ``memory_search``: BM25 and vector lists, fusion, optional rerank, chunks -> memories.

Order of work for one query:

1. readiness — an uninitialised, incompatible (settings changed) or still-empty index is
   ``index_building`` with ``indexed_count`` and ``source_count``; never a silent fallback to exact;
2. the query embedding — a model call, made with no lock or transaction held;
3. in one read snapshot: the keyword list and the vector list (each up to ``candidates_per_list``
   valid chunks), with any date or session filter applied first; every candidate chunk is checked
   against the current memory (same memory id, same content hash, inside the filter), so deleted or
   edited memories never come back from stale chunks;
4. fusion to ``fused_candidates`` chunks, the optional rerank (after the snapshot is released), then
   the chunks collapse to their memories in order and the limit applies.

``truncated`` says a candidate budget or the limit was reached; ``partial`` says memories are still
waiting to be indexed (search served what is indexed). No scores are returned.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import apsw
import numpy as np
from obsmem.indexer import stores
from obsmem.indexer.engine import SemanticIndexer
from obsmem.indexer.project import ProjectIndex
from obsmem.indexer.state import IndexState
from obsmem.indexer.vectors import Filter, VectorSet
from obsmem.retrieval.bm25 import Bm25List
from obsmem.retrieval.fusion import fuser
from obsmem.retrieval.ranked import RankedList
from obsmem.retrieval.rerank import Reranker, rerank_order
from obsmem.retrieval.results import Hit, SearchResult
from obsmem.retrieval.search import SearchRequest

from obsmem.errors import IndexBuilding
from obsmem.settings_semantic import SemanticSettings

# Extra candidates fetched per list, beyond the budget, to make up for chunks that fail the stale check.
MAX_STALE_MARGIN = 1000


@dataclass(frozen=True)
class Candidate:
    label: int
    text: str
    hit: Hit


def vector_list(vectors: VectorSet, query: np.ndarray, k: int, where: Filter, exact_max: int) -> RankedList:
    """Top-k chunks by cosine similarity among those passing the filter (filter first, then rank)."""
    result = RankedList("vector")
    if where.is_open:
        items = vectors.approximate(query, k + 1)
        if items is None:
            items = vectors.exact(query, None, k + 1)
    else:
        slots = vectors.selection(where)
        items = None
        if len(slots) > exact_max:
            items = vectors.approximate(query, k + 1, where)
        if items is None:
            items = vectors.exact(query, slots, k + 1)
    result.full = len(items) > k
    result.items = items[:k]
    return result


class HybridSearcher:
    def __init__(
        self, indexer: SemanticIndexer, settings: SemanticSettings, reranker: Reranker | None
    ) -> None:
        self.indexer = indexer
        self.settings = settings
        self.reranker = reranker
        self.bm25 = Bm25List(settings.bm25)
        self.fuse = fuser(settings.fusion.method, rrf_k=settings.fusion.rrf_k)
        self.weights = settings.fusion.weights

    def _building(self, index: ProjectIndex, conn: apsw.Connection, compatible: bool) -> IndexBuilding:
        return IndexBuilding(
            "the semantic index is still being built; search again shortly or use mode 'exact'",
            indexed_count=stores.indexed_count(conn) if compatible else 0,
            source_count=stores.source_count(conn),
        )

    def search(self, project: str, request: SearchRequest) -> SearchResult:
        index = self.indexer.project(project)
        with index.db.read() as conn:
            state = IndexState.read(conn)
            if not state.compatible_with(index.signature, index.tokenizer) or state.dimensions is None:
                if stores.source_count(conn) == 0:
                    return SearchResult(mode="hybrid")
                raise self._building(index, conn, compatible=False)
        use_vectors = self.weights.get("vector", 1.0) > 0
        query_vector = index.embedder.embed_query(request.query) if use_vectors else None
        vectors = index.vectors()
        where = Filter(request.window.lower, request.window.upper, request.session_id)
        fusion = self.settings.fusion
        k = fusion.candidates_per_list
        with index.db.read() as conn:
            state = IndexState.read(conn)
            if vectors is None or not state.compatible_with(index.signature, index.tokenizer):
                raise self._building(index, conn, compatible=False)
            if vectors.live == 0:
                if stores.source_count(conn) == 0:
                    return SearchResult(mode="hybrid")
                raise self._building(index, conn, compatible=True)
            partial = bool(conn.execute("SELECT EXISTS (SELECT 1 FROM semantic_pending)").fetchone()[0])
            margin = self._stale_margin(conn) if partial else 0
            lists: list[RankedList] = []
            if self.weights.get("bm25", 1.0) > 0:
                lists.append(self.bm25.search(conn, request.query, k + margin, where))
            if query_vector is not None:
                lists.append(
                    vector_list(
                        vectors, query_vector, k + margin, where, self.settings.index.exact_scan_max_chunks
                    )
                )
            valid = self._validated(conn, {label for ranked in lists for label in ranked.labels}, where)
        for ranked in lists:
            kept = [item for item in ranked.items if item[0] in valid]
            ranked.full = ranked.full or len(kept) > k
            ranked.items = kept[:k]
        fused = self.fuse(lists, self.weights)
        truncated = any(ranked.full for ranked in lists) or len(fused) > fusion.fused_candidates
        candidates = [valid[label] for label, _ in fused[: fusion.fused_candidates]]
        if self.reranker is not None and candidates:
            scores = self.reranker.score(request.query, [c.text for c in candidates])
            candidates = [candidates[i] for i in rerank_order(scores, self.reranker.settings.min_score)]
        hits: list[Hit] = []
        seen: set[str] = set()
        for candidate in candidates:
            if candidate.hit.memory_id in seen:
                continue
            seen.add(candidate.hit.memory_id)
            hits.append(candidate.hit)
        if len(hits) > request.limit:
            truncated = True
        return SearchResult(mode="hybrid", hits=hits[: request.limit], truncated=truncated, partial=partial)

    def _stale_margin(self, conn: apsw.Connection) -> int:
        """Indexed chunks whose memory has changed since (pending), capped: what the lists may lose."""
        return int(
            conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM semantic_pending AS p"
                " JOIN semantic_chunks AS c ON c.memory_row = p.memory_row LIMIT ?)",
                (MAX_STALE_MARGIN,),
            ).fetchone()[0]
        )

    def _validated(self, conn: apsw.Connection, labels: set[int], where: Filter) -> dict[int, Candidate]:
        """The candidates whose chunk still describes the current memory and passes the filter."""
        found: dict[int, Candidate] = {}
        hashes: dict[str, str] = {}
        ordered = sorted(labels)
        for start in range(0, len(ordered), 500):
            part = ordered[start : start + 500]
            rows = conn.execute(
                "SELECT c.id, c.text, s.memory_id, s.content_hash,"
                " m.memory_id, m.kind, m.session_id, m.date, m.importance, m.content"
                " FROM semantic_chunks AS c JOIN semantic_sources AS s ON s.memory_row = c.memory_row"
                " JOIN memories AS m ON m.id = c.memory_row"
                f" WHERE c.id IN ({','.join('?' * len(part))})",
                part,
            ).fetchall()
            for (
                label,
                text,
                source_id,
                source_hash,
                memory_id,
                kind,
                session_id,
                date,
                importance,
                content,
            ) in rows:
                if memory_id != source_id:
                    continue
                digest = hashes.get(memory_id)
                if digest is None:
                    digest = hashes[memory_id] = hashlib.sha256(content.encode("utf-8")).hexdigest()
                if digest != source_hash:
                    continue
                if (where.lower is not None and date < where.lower) or (
                    where.upper is not None and date > where.upper
                ):
                    continue
                if where.session_id is not None and session_id != where.session_id:
                    continue
                hit = Hit.from_row((memory_id, kind, session_id, date, importance, content))
                found[int(label)] = Candidate(int(label), text, hit)
        return found
