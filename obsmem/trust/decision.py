"""The decision rule: what to do with a candidate the judge rated ``p`` for a query.

A judge's confidence is evidence, not trust. While a tier has fewer than ``min_sample`` resolved judgments
there is nothing to calibrate ``p`` against, so the rule asks a person (cold start escalates instead of
guessing); after that a candidate is injected (shown, marked untrusted) when ``p`` reaches the threshold and
held otherwise. A judge call that failed has no ``p`` and always escalates: a failure is never a "no".
"""

from __future__ import annotations

import math
from typing import Literal

Decision = Literal["inject", "hold", "escalate"]
DECISIONS: tuple[str, ...] = ("inject", "hold", "escalate")


def decide_injection(p: float | None, resolved: int, *, threshold: float = 0.7, min_sample: int = 3) -> Decision:
    """``escalate`` without a usable ``p`` or with fewer than ``min_sample`` resolved judgments; otherwise
    ``inject`` when ``p >= threshold``, else ``hold``."""
    if p is None or not math.isfinite(p) or not 0.0 <= p <= 1.0:
        return "escalate"
    if resolved < min_sample:
        return "escalate"
    return "inject" if p >= threshold else "hold"
