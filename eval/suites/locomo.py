"""LoCoMo: turn-level evidence recall, each conversation in its own project, two ways of storing it.

- way ``a`` (``locomo (a) turns``): every turn is an observation citing itself;
- way ``b`` (``locomo (b) observations``): the dataset's per-session observations cite their turns, and
  retrieved observations become turns through their source refs (each memory's cited turns in order,
  first occurrence wins) — the observational-memory path;
- way ``c`` (``locomo (c) events``): the turns stored as conversation events only, searched with scope
  ``conversation`` — conversation search, which must match way (a);
- way ``d`` (``locomo (d) events+observations``): the events and the dataset's observations, searched
  with scope ``all``: an event is its own turn, an observation its cited turns.

The metric is the LoCoMo paper's: per question, the fraction of its evidence turns among the first k
retrieved turns, averaged over questions, overall and per category, at k = 5, 10, 25, 50 (and at 1, which
the never-below check reads). In the hybrid modes ``candidates.<list>@<budget>`` is the same fraction
over a whole candidate list.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from obsmem.app import Obsmem
from obsmem.eval.datasets.locomo import Conversation, turns_of
from obsmem.eval.ingest import WAYS, Citations, index_project, load_locomo_conversation
from obsmem.eval.metrics import evidence_recall, evidence_recalls
from obsmem.eval.modes import retrieve
from obsmem.eval.progress import SILENT, Progress
from obsmem.eval.results import ModeResult, Scores
from obsmem.eval.suites.labelled import candidate_budgets

KS = (1, 5, 10, 25, 50)
DATASETS = {
    "a": "locomo (a) turns",
    "b": "locomo (b) observations",
    "c": "locomo (c) events",
    "d": "locomo (d) events+observations",
}
# The search scope of each way.
SCOPES = {"a": "memories", "b": "memories", "c": "conversation", "d": "all"}


@dataclass
class Loaded:
    conversation: Conversation
    project: str
    cites: Citations

    def turns(self, ranking: Sequence[str]) -> list[str]:
        return turns_of([self.cites.get(memory_id, ()) for memory_id in ranking])


def parse_ways(text: str) -> tuple[str, ...]:
    from obsmem.errors import ValidationFailed

    ways = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if not ways or any(way not in WAYS for way in ways):
        raise ValidationFailed("ways must be a comma-separated list of a, b, c and d", field="ways")
    return ways


def load_way(
    memory: Obsmem, conversations: Sequence[Conversation], way: str, progress: Progress = SILENT, *, index: bool = True
) -> tuple[list[Loaded], float, float]:
    """Ingest (and index) every conversation for ``way``; returns them with ingest and index seconds."""
    loaded, ingest_s, index_s = [], 0.0, 0.0
    with progress.bar(f"locomo ({way}): ingest and index", len(conversations), unit="conversation") as bar:
        for conversation in conversations:
            started = time.perf_counter()
            project, cites = load_locomo_conversation(memory, conversation, way)
            ingest_s += time.perf_counter() - started
            started = time.perf_counter()
            if index:
                index_project(memory, project)
            index_s += time.perf_counter() - started
            loaded.append(Loaded(conversation, project, cites))
            bar.update(1)
    return loaded, ingest_s, index_s


def run_way(
    memory: Obsmem, loaded: Sequence[Loaded], way: str, modes: Sequence[str], progress: Progress = SILENT
) -> list[ModeResult]:
    budgets = candidate_budgets(memory)
    dataset = DATASETS[way]
    total = sum(len(item.conversation.questions) for item in loaded)
    results = []
    for mode in modes:
        scores, latencies = Scores(), []
        started = time.perf_counter()
        with progress.bar(f"{dataset}: {mode}", total) as bar:
            for item in loaded:
                for question in item.conversation.questions:
                    retrieved = retrieve(memory, item.project, mode, question.text, scope=SCOPES[way])
                    latencies.append(retrieved.seconds)
                    values = evidence_recalls(item.turns(retrieved.ranking), question.evidence, KS)
                    stages = retrieved.stages
                    if stages is not None and stages.bm25 is not None and stages.vector is not None:
                        for name, ranking in (
                            ("bm25", stages.bm25),
                            ("vector", stages.vector),
                            ("fused", stages.fused),
                        ):
                            turns = item.turns(ranking)
                            values[f"candidates.{name}@{budgets[name]}"] = evidence_recall(
                                turns, question.evidence, max(len(turns), 1)
                            )
                    scores.add(values, (question.category_name,), f"{item.conversation.sample_id}#{question.index}")
                    bar.update(1)
        results.append(ModeResult.from_scores(mode, dataset, scores, latencies, time.perf_counter() - started))
    return results
