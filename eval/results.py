"""What one eval run measures, per mode: the ``results.json`` entries and the numbers behind them
(``per_question.jsonl``: each question's metrics and latency, to compare two runs question by question).

``results.json`` is a JSON list with one entry per (dataset, mode)::

    {"mode": "hybrid", "dataset": "locomo (a) turns", "questions": 999,
     "metrics": {"recall@5": 0.71, ...}, "by_category": {"single-hop": {"recall@5": ...}, ...},
     "latency_ms": {"p50": 21.3, "p95": 35.0}, "elapsed_s": 24.1}

``metrics`` are means over the questions that have them (a labelled negative has no ``hit@k``, a
positive no ``negative_hit_rate``); ``by_category`` holds the same means per group (LoCoMo categories,
LongMemEval question types, labelled splits and kinds). Latencies are wall-clock per search call,
query embedding included.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest-rank percentile (``share`` in [0, 1]); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass
class Scores:
    """Per-question metric values, overall and by group; a question may belong to several groups."""

    values: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    groups: dict[str, dict[str, list[float]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))
    questions: int = 0
    per_question: list[dict[str, Any]] = field(default_factory=list)

    def add(self, values: Mapping[str, float], groups: Iterable[str] = (), question: str | None = None) -> None:
        groups = tuple(groups)
        self.questions += 1
        self.per_question.append({"question": question or str(self.questions), "groups": list(groups),
                                  "metrics": dict(values)})
        for name, value in values.items():
            self.values[name].append(value)
        for group in groups:
            for name, value in values.items():
                self.groups[group][name].append(value)

    def means(self) -> dict[str, float]:
        return {name: fmean(found) for name, found in self.values.items() if found}

    def group_means(self) -> dict[str, dict[str, float]]:
        return {
            group: {name: fmean(found) for name, found in metrics.items() if found}
            for group, metrics in self.groups.items()
        }


@dataclass
class ModeResult:
    """One entry of ``results.json``, plus the per-question latencies the plots draw (not serialised)."""

    mode: str
    dataset: str
    questions: int
    metrics: dict[str, float]
    by_category: dict[str, dict[str, float]]
    latencies_ms: list[float]
    elapsed_s: float
    per_question: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_scores(
        cls, mode: str, dataset: str, scores: Scores, latencies_s: Sequence[float], elapsed_s: float
    ) -> ModeResult:
        return cls(
            mode=mode,
            dataset=dataset,
            questions=scores.questions,
            metrics=scores.means(),
            by_category=scores.group_means(),
            latencies_ms=[1000.0 * value for value in latencies_s],
            elapsed_s=elapsed_s,
            per_question=[
                {**record, "latency_ms": round(1000.0 * seconds, 2)}
                for record, seconds in zip(scores.per_question, latencies_s, strict=False)
            ],
        )

    @property
    def latency_ms(self) -> dict[str, float]:
        return {
            "p50": round(percentile(self.latencies_ms, 0.50), 2),
            "p95": round(percentile(self.latencies_ms, 0.95), 2),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "dataset": self.dataset,
            "questions": self.questions,
            "metrics": {name: round(value, 4) for name, value in self.metrics.items()},
            "by_category": {
                group: {name: round(value, 4) for name, value in metrics.items()}
                for group, metrics in sorted(self.by_category.items())
            },
            "latency_ms": self.latency_ms,
            "elapsed_s": round(self.elapsed_s, 2),
        }
