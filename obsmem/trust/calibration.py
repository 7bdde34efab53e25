"""Calibration: how the judge's confidence turned out, from the resolved judgments of a tier.

Reliability is read per ``p`` bucket (tenths): how many judgments fell there and what share resolved true.
The precision of ``inject`` at the configured threshold is the share of resolved judgments with
``p >= threshold`` that resolved true. The suggested threshold is the lowest ``p`` cut whose precision
meets the target, so as few relevant notes as possible are held back; with no such cut there is none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

BUCKETS = 10


@dataclass(frozen=True)
class Bucket:
    low: float
    high: float
    count: int
    resolved_true: int

    def to_dict(self) -> dict[str, Any]:
        rate = self.resolved_true / self.count if self.count else None
        return {"p_from": self.low, "p_to": self.high, "count": self.count, "true": self.resolved_true, "rate": rate}


@dataclass
class CalibrationReport:
    sample: int
    threshold: float
    target_precision: float
    precision_at_threshold: float | None
    injected_at_threshold: int
    suggested_threshold: float | None
    buckets: list[Bucket] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sample": self.sample,
            "threshold": self.threshold,
            "target_precision": self.target_precision,
            "precision_at_threshold": self.precision_at_threshold,
            "injected_at_threshold": self.injected_at_threshold,
            "suggested_threshold": self.suggested_threshold,
            "buckets": [bucket.to_dict() for bucket in self.buckets],
        }


def _precision(rows: Sequence[tuple[float, bool]], cut: float) -> tuple[float | None, int]:
    chosen = [outcome for p, outcome in rows if p >= cut]
    return (sum(chosen) / len(chosen) if chosen else None), len(chosen)


def calibrate(rows: Sequence[tuple[float, bool]], *, threshold: float, target_precision: float) -> CalibrationReport:
    """The report for ``(p, outcome)`` pairs of resolved judgments."""
    buckets = []
    for index in range(BUCKETS):
        low, high = index / BUCKETS, (index + 1) / BUCKETS
        inside = [outcome for p, outcome in rows if low <= p < high or (index == BUCKETS - 1 and p == 1.0)]
        buckets.append(Bucket(round(low, 1), round(high, 1), len(inside), sum(inside)))
    precision, injected = _precision(rows, threshold)
    suggested = None
    for cut in sorted({p for p, _ in rows}):
        met, _ = _precision(rows, cut)
        if met is not None and met >= target_precision:
            suggested = cut
            break
    return CalibrationReport(len(rows), threshold, target_precision, precision, injected, suggested, buckets)
