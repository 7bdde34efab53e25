"""A prototype hybrid searcher over one corpus, parameterised by a :class:`Recipe`.

This is the research twin of the product's hybrid search: same legs (FTS5 BM25, all-MiniLM-L6-v2), same
fusion candidates (each leg's top ``depth``), but everything in memory so a study can compare many
recipes on the same corpus cheaply. BM25 results and embeddings are cached per corpus.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from obsmem.eval.research.dense import Encoder, top_k
from obsmem.eval.research.documents import COLUMNS, ContextDocument
from obsmem.eval.research.fusion import (
    convex_fusion,
    minmax_fusion,
    neighbour_smoothing,
    ranking,
    reciprocal_rank_fusion,
    zscore_fusion,
)
from obsmem.eval.research.lexical import Fts5Index, content_terms, match_expression, words

PORTER = "porter unicode61 remove_diacritics 2"
FUSIONS = ("convex", "rrf", "minmax", "zscore")


@dataclass(frozen=True)
class Recipe:
    """Everything that decides a ranking. ``legs`` is ``bm25``, ``vector`` or ``hybrid``."""

    name: str
    legs: str = "hybrid"
    columns: tuple[str, ...] = COLUMNS
    weights: tuple[float, ...] = (1.0, 0.5, 0.2, 1.0)
    tokenize: str = PORTER
    stopwords: bool = True
    views: tuple[str, ...] = ("body",)
    fusion: str = "convex"
    alpha: float = 0.5
    rrf_k: float = 60.0
    rrf_weights: tuple[float, float] = (1.0, 1.0)
    depth: int = 100
    vector_depth: int | None = None  # None: the same as depth; 0: vectors only re-order BM25's candidates
    smoothing: float = 0.0

    def __post_init__(self) -> None:
        if self.legs not in ("bm25", "vector", "hybrid"):
            raise ValueError("legs must be bm25, vector or hybrid")
        if self.fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {FUSIONS}")
        if len(self.columns) != len(self.weights) or not set(self.columns) <= set(COLUMNS):
            raise ValueError("columns and weights must match, columns from COLUMNS")


@dataclass
class CorpusIndex:
    """One corpus (a conversation, or a haystack): its documents, FTS5 tables and embeddings."""

    documents: Sequence[ContextDocument]
    encoder: Encoder | None = None
    _fts: dict[tuple[tuple[str, ...], str], Fts5Index] = field(default_factory=dict)
    _views: dict[str, np.ndarray] = field(default_factory=dict)
    _queries: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.keys = [d.key for d in self.documents]
        self.neighbours: dict[int, tuple[int, ...]] = {}
        for i, doc in enumerate(self.documents):
            near = (i - 1, i + 1)
            self.neighbours[i] = tuple(
                j for j in near if 0 <= j < len(self.documents) and self.documents[j].session == doc.session
            )
        self._bm25 = lru_cache(maxsize=65536)(self._bm25_uncached)

    # --- lexical leg -------------------------------------------------------------------------------
    def fts(self, columns: tuple[str, ...], tokenize: str) -> Fts5Index:
        key = (columns, tokenize)
        if key not in self._fts:
            index = [COLUMNS.index(c) for c in columns]
            rows = ([d.columns()[i] for i in index] for d in self.documents)
            self._fts[key] = Fts5Index(rows, columns=columns, tokenize=tokenize)
        return self._fts[key]

    def _bm25_uncached(
        self,
        query: str,
        columns: tuple[str, ...],
        weights: tuple[float, ...],
        tokenize: str,
        stopwords: bool,
        limit: int,
    ) -> tuple[tuple[int, float], ...]:
        terms = content_terms(query) if stopwords else list(dict.fromkeys(words(query)))
        hits = self.fts(columns, tokenize).search(match_expression(terms), limit, weights)
        return tuple((h.doc, h.score) for h in hits)

    def bm25(self, query: str, recipe: Recipe, limit: int) -> dict[int, float]:
        return dict(self._bm25(query, recipe.columns, recipe.weights, recipe.tokenize, recipe.stopwords, limit))

    # --- vector leg --------------------------------------------------------------------------------
    def _require_encoder(self) -> Encoder:
        if self.encoder is None:
            raise RuntimeError("this corpus has no encoder; vector recipes need one")
        return self.encoder

    def view_matrix(self, view: str) -> np.ndarray:
        if view not in self._views:
            self._views[view] = self._require_encoder().encode([d.view(view) for d in self.documents])
        return self._views[view]

    def embed_queries(self, queries: Sequence[str]) -> None:
        missing = list(dict.fromkeys(q for q in queries if q not in self._queries))
        if missing:
            for text, vector in zip(missing, self._require_encoder().encode(missing), strict=True):
                self._queries[text] = vector

    def cosines(self, query: str, views: tuple[str, ...]) -> np.ndarray:
        """Cosine of the query with every document: the mean over the views asked for."""
        self.embed_queries([query])
        vector = self._queries[query]
        return np.mean([self.view_matrix(v) @ vector for v in views], axis=0)

    # --- the search --------------------------------------------------------------------------------
    def search(self, query: str, recipe: Recipe, limit: int = 50) -> list[str]:
        """Ranked document keys, best first, at most ``limit``."""
        scores = self.scores(query, recipe)
        return [self.keys[int(i)] for i in ranking(scores)[:limit]]

    def scores(self, query: str, recipe: Recipe) -> dict[int, float]:
        if recipe.legs == "bm25":
            fused: dict[int, float] = dict(self.bm25(query, recipe, recipe.depth))
        else:
            cos = self.cosines(query, recipe.views)
            depth = recipe.depth if recipe.vector_depth is None else recipe.vector_depth
            top, top_scores = top_k(cos, depth)
            vector = {int(i): float(s) for i, s in zip(top, top_scores, strict=True)}
            if recipe.legs == "vector":
                fused = dict(vector)
            else:
                lexical = self.bm25(query, recipe, recipe.depth)
                fused = self._fuse(lexical, vector, cos, recipe)
        if recipe.smoothing > 0:
            fused = neighbour_smoothing(fused, self.neighbours, recipe.smoothing)
        return fused

    def _fuse(
        self, lexical: dict[int, float], vector: dict[int, float], cos: np.ndarray, recipe: Recipe
    ) -> dict[int, float]:
        if recipe.fusion == "rrf":
            return reciprocal_rank_fusion([lexical, vector], recipe.rrf_weights, recipe.rrf_k)
        # Score fusions see the exact cosine of every candidate, BM25-only ones included.
        union = {**{d: float(cos[d]) for d in lexical}, **vector}
        if recipe.fusion == "convex":
            return convex_fusion(lexical, union, recipe.alpha)
        if recipe.fusion == "minmax":
            return minmax_fusion(lexical, vector, recipe.alpha)
        full_lexical = {d: lexical.get(d, 0.0) for d in union}
        return zscore_fusion(full_lexical, union, recipe.alpha)
