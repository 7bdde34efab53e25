"""The search modes the harness compares, each served by the product's own search code.

- ``exact`` — ``Obsmem.search(mode="exact")``: literal substring, newest first, at most 50 hits;
- ``bm25`` / ``vector`` — one candidate list of hybrid search alone, in its own order (no fusion);
- ``hybrid`` — the fused ranking, without the reranker even when one is configured;
- ``hybrid+rerank`` — what ``memory_search`` returns with the configured reranker (needs one).

The four semantic modes run ``Obsmem.search_stages``, which is ``Obsmem.search`` in hybrid mode with a
plan (which lists, whether to rerank) that also returns each stage's ranking. Their ranking here is the
whole final ranking (up to the fused candidate budget); a search's hits are its first ``limit``
entries, so metrics at k <= 50 are exactly what a caller asking for k hits gets.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from obsmem.app import Obsmem
from obsmem.errors import ValidationFailed
from obsmem.retrieval import SearchPlan, StageRankings

MODES: tuple[str, ...] = ("exact", "bm25", "vector", "hybrid", "hybrid+rerank")
PLANS: dict[str, SearchPlan] = {
    "bm25": SearchPlan(lists=("bm25",), rerank=False),
    "vector": SearchPlan(lists=("vector",), rerank=False),
    "hybrid": SearchPlan(rerank=False),
    "hybrid+rerank": SearchPlan(),
}
EXACT_LIMIT = 50  # the most hits one exact search returns


def parse_modes(text: str) -> tuple[str, ...]:
    """``"exact,hybrid"`` -> ``("exact", "hybrid")``; ``"all"`` -> every mode; unknown names are errors."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    if names == ["all"]:
        return MODES
    unknown = [name for name in names if name not in MODES]
    if not names or unknown:
        raise ValidationFailed(f"modes must be a comma-separated list of {', '.join(MODES)} (or 'all')", field="modes")
    return tuple(dict.fromkeys(names))


def available_modes(memory: Obsmem) -> tuple[str, ...]:
    """The modes this service's settings can run."""
    if memory.hybrid is None:
        return ("exact",)
    if memory.reranker is None:
        return MODES[:-1]
    return MODES


def check_modes(memory: Obsmem, modes: tuple[str, ...]) -> None:
    missing = [mode for mode in modes if mode not in available_modes(memory)]
    if not missing:
        return
    if memory.hybrid is None:
        why = "needs the [semantic] section in the settings"
    else:
        why = "needs a configured reranker ([semantic.reranker])"
    raise ValidationFailed(f"mode {missing[0]} {why}", code="mode_unavailable", field="modes")


@dataclass
class Retrieved:
    """One search: the memory ids it ranked (best first), each stage's ranking, and how long it took."""

    ranking: list[str]
    stages: StageRankings | None
    seconds: float


def retrieve(
    memory: Obsmem,
    project: str,
    mode: str,
    query: str,
    *,
    after: str | None = None,
    before: str | None = None,
    plan: SearchPlan | None = None,
    scope: str | None = None,
) -> Retrieved:
    """Run ``query`` in ``mode`` (``plan`` overrides the mode's plan, e.g. to ignore the floor) over
    ``scope`` (None: memories). Event hits rank by their event id."""
    started = time.perf_counter()
    if mode == "exact":
        result = memory.search(project, query, mode="exact", after=after, before=before, limit=EXACT_LIMIT, scope=scope)
        return Retrieved([hit.memory_id for hit in result.hits], None, time.perf_counter() - started)
    _, stages = memory.search_stages(project, query, plan or PLANS[mode], after=after, before=before, scope=scope)
    return Retrieved(stages.final, stages, time.perf_counter() - started)
