"""Ways to fuse a BM25 list and a vector list, each a short pure function.

Every function takes the two legs as ``{doc: score}`` for that leg's candidates (BM25 scores positive,
higher is better; cosines in [-1, 1]) and returns ``{doc: fused score}`` over the union of candidates.

- :func:`reciprocal_rank_fusion` (Cormack et al., 2009): ``sum_i w_i / (k + rank_i)``; ranks only.
- :func:`convex_fusion`: ``alpha * bm25 / max(bm25) + (1 - alpha) * cosine``. BM25 has no fixed scale,
  so it is divided by the best BM25 score of the query; the cosine already has one and is used as is,
  which keeps the blend independent of how many candidates each leg returned.
- :func:`minmax_fusion` and :func:`zscore_fusion`: the usual score normalisations, for comparison.

A document missing from one leg's candidates scores 0 on that leg (for BM25 that is exact: an OR query
that does not match a document gives it nothing). For the cosine of BM25-only candidates the caller
should pass the exact cosine (the vectors are stored), so nothing is guessed.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from statistics import fmean, pstdev
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def ranking(scores: Mapping[K, float]) -> list[K]:
    """Documents by descending score; ties keep insertion order."""
    return sorted(scores, key=lambda doc: -scores[doc])


def reciprocal_rank_fusion(
    legs: Sequence[Mapping[K, float]], weights: Sequence[float] | None = None, k: float = 60.0
) -> dict[K, float]:
    weights = weights or [1.0] * len(legs)
    fused: dict[K, float] = {}
    for leg, weight in zip(legs, weights, strict=True):
        for rank, doc in enumerate(ranking(leg), start=1):
            fused[doc] = fused.get(doc, 0.0) + weight / (k + rank)
    return fused


def convex_fusion(bm25: Mapping[K, float], cosine: Mapping[K, float], alpha: float = 0.5) -> dict[K, float]:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError("alpha must be in [0, 1]")
    top = max(bm25.values(), default=0.0)
    fused: dict[K, float] = {}
    for doc in (*bm25, *cosine):
        if doc in fused:
            continue
        lexical = bm25.get(doc, 0.0) / top if top > 0 else 0.0
        fused[doc] = alpha * lexical + (1.0 - alpha) * cosine.get(doc, 0.0)
    return fused


def _minmax(scores: Mapping[K, float]) -> dict[K, float]:
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    span = high - low
    return {doc: (value - low) / span if span > 0 else 1.0 for doc, value in scores.items()}


def _zscore(scores: Mapping[K, float]) -> dict[K, float]:
    if not scores:
        return {}
    mean, spread = fmean(scores.values()), pstdev(scores.values())
    return {doc: (value - mean) / spread if spread > 0 else 0.0 for doc, value in scores.items()}


def _blend(left: Mapping[K, float], right: Mapping[K, float], alpha: float, missing: float) -> dict[K, float]:
    fused: dict[K, float] = {}
    for doc in (*left, *right):
        if doc not in fused:
            fused[doc] = alpha * left.get(doc, missing) + (1.0 - alpha) * right.get(doc, missing)
    return fused


def minmax_fusion(bm25: Mapping[K, float], cosine: Mapping[K, float], alpha: float = 0.5) -> dict[K, float]:
    """Each leg min-max scaled over its own candidates, then blended; a missing leg counts 0."""
    return _blend(_minmax(bm25), _minmax(cosine), alpha, 0.0)


def zscore_fusion(bm25: Mapping[K, float], cosine: Mapping[K, float], alpha: float = 0.5) -> dict[K, float]:
    """Each leg standardised over the union of candidates (callers pass both legs' scores for all)."""
    return _blend(_zscore(bm25), _zscore(cosine), alpha, 0.0)


def neighbour_smoothing(
    scores: Mapping[K, float], neighbours: Mapping[K, Sequence[K]], weight: float
) -> dict[K, float]:
    """``score + weight * max(0, best neighbour's score)``: a hit lifts the turns around it.

    ``neighbours`` maps every document to the documents beside it (symmetric). Documents that only a
    neighbour reaches enter with that share, which lets an answer sharing no words with the question
    follow the turn that asked it.
    """
    reached: set[K] = set(scores)
    for doc in scores:
        reached.update(neighbours.get(doc, ()))
    out: dict[K, float] = {}
    for doc in reached:
        best = max((scores[o] for o in neighbours.get(doc, ()) if o in scores), default=0.0)
        if doc in scores or best > 0:
            out[doc] = scores.get(doc, 0.0) + weight * max(best, 0.0)
    return out
