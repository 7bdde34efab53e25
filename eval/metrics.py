"""Retrieval metrics over ranked id lists.

All functions take the ranked ids a system returned (best first, no duplicates expected; duplicates are
counted once) and the set of relevant ids. ``k`` cuts the ranked list; a list shorter than ``k`` is not
padded, so a system that returns nothing scores zero.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from statistics import fmean


def _top(ranked: Sequence[Hashable], k: int) -> set[Hashable]:
    if k < 1:
        raise ValueError("k must be at least 1")
    return set(ranked[:k])


def evidence_recall(ranked: Sequence[Hashable], relevant: Collection[Hashable], k: int) -> float:
    """The LoCoMo paper's recall: the fraction of the relevant ids found in the top ``k``."""
    if not relevant:
        raise ValueError("a question needs at least one relevant id")
    wanted = set(relevant)
    return len(wanted & _top(ranked, k)) / len(wanted)


def recall_any(ranked: Sequence[Hashable], relevant: Collection[Hashable], k: int) -> float:
    """1.0 when any relevant id is in the top ``k`` (LongMemEval's ``recall_any@k``)."""
    return float(bool(set(relevant) & _top(ranked, k)))


def recall_all(ranked: Sequence[Hashable], relevant: Collection[Hashable], k: int) -> float:
    """1.0 when every relevant id is in the top ``k`` (LongMemEval's ``recall_all@k``)."""
    return float(set(relevant) <= _top(ranked, k))


def ndcg(ranked: Sequence[Hashable], relevant: Collection[Hashable], k: int) -> float:
    """Binary-relevance nDCG@k: hits discounted by log2(rank + 1), over the ideal ordering."""
    if k < 1:
        raise ValueError("k must be at least 1")
    wanted = set(relevant)
    if not wanted:
        raise ValueError("a question needs at least one relevant id")
    seen: set[Hashable] = set()
    gain = 0.0
    for rank, item in enumerate(ranked[:k], start=1):
        if item in wanted and item not in seen:
            gain += 1.0 / math.log2(rank + 1)
        seen.add(item)
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(k, len(wanted)) + 1))
    return gain / ideal


@dataclass
class ScoreTable:
    """Per-question scores accumulated by metric name and category; means on demand."""

    scores: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    by_category: dict[str, dict[str, list[float]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )

    def add(self, category: str, values: dict[str, float]) -> None:
        for name, value in values.items():
            self.scores[name].append(value)
            self.by_category[category][name].append(value)

    @property
    def questions(self) -> int:
        return max((len(v) for v in self.scores.values()), default=0)

    def means(self) -> dict[str, float]:
        return {name: fmean(values) for name, values in self.scores.items()}

    def category_means(self) -> dict[str, dict[str, float]]:
        return {
            category: {name: fmean(values) for name, values in metrics.items()}
            for category, metrics in sorted(self.by_category.items())
        }

    def merge(self, others: Iterable[ScoreTable]) -> ScoreTable:
        for other in others:
            for name, values in other.scores.items():
                self.scores[name].extend(values)
            for category, metrics in other.by_category.items():
                for name, values in metrics.items():
                    self.by_category[category][name].extend(values)
        return self


def evidence_recalls(ranked: Sequence[Hashable], relevant: Collection[Hashable], ks: Iterable[int]) -> dict[str, float]:
    """``{"recall@k": ...}`` for each k."""
    return {f"recall@{k}": evidence_recall(ranked, relevant, k) for k in ks}
