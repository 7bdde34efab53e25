"""Fusion: several ranked lists of chunk labels -> one ranking.

Each method is a small pure function over :class:`RankedList` objects and per-list weights; the
configured one is chosen once by name (:func:`fuser`). Ties are broken by the best rank an item has in
any list, then by list order (as given), so the result is deterministic.

- ``rrf`` — reciprocal-rank fusion (Cormack, Clarke and Büttcher, SIGIR 2009): an item scores
  ``sum(weight / (k + rank))`` over the lists that hold it, ranks counted from 1. Uses ranks only, so
  lists with incomparable scores (BM25, cosine) combine without calibration.
- ``convex`` — a weighted sum of each list's scores min-max normalised to [0, 1] within the list
  (absent items contribute 0). Uses score gaps, which RRF ignores.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from obsmem.retrieval.ranked import RankedList

Fused = list[tuple[int, float]]
Fuser = Callable[[Sequence[RankedList], Mapping[str, float]], Fused]


def _ordered(scores: dict[int, float], first_seen: dict[int, tuple[int, int]]) -> Fused:
    return sorted(scores.items(), key=lambda item: (-item[1], *first_seen[item[0]]))


def _first_seen(lists: Sequence[RankedList]) -> dict[int, tuple[int, int]]:
    seen: dict[int, tuple[int, int]] = {}
    for list_position, ranked in enumerate(lists):
        for rank, label in enumerate(ranked.labels):
            if label not in seen or (rank, list_position) < seen[label]:
                seen[label] = (rank, list_position)
    return seen


def reciprocal_rank_fusion(lists: Sequence[RankedList], weights: Mapping[str, float], k: float = 60.0) -> Fused:
    scores: dict[int, float] = {}
    for ranked in lists:
        weight = weights.get(ranked.name, 1.0)
        if weight == 0:
            continue
        for rank, label in enumerate(ranked.labels, start=1):
            scores[label] = scores.get(label, 0.0) + weight / (k + rank)
    return _ordered(scores, _first_seen(lists))


def convex_fusion(lists: Sequence[RankedList], weights: Mapping[str, float]) -> Fused:
    scores: dict[int, float] = {}
    for ranked in lists:
        weight = weights.get(ranked.name, 1.0)
        if weight == 0 or not ranked.items:
            continue
        values = [score for _, score in ranked.items]
        low, high = min(values), max(values)
        span = high - low
        for label, score in ranked.items:
            normalised = (score - low) / span if span > 0 else 1.0
            scores[label] = scores.get(label, 0.0) + weight * normalised
    return _ordered(scores, _first_seen(lists))


def fuser(method: str, *, rrf_k: float = 60.0) -> Fuser:
    if method == "rrf":
        return lambda lists, weights: reciprocal_rank_fusion(lists, weights, rrf_k)
    if method == "convex":
        return convex_fusion
    raise ValueError(f"unknown fusion method '{method}' (known: rrf, convex)")
