"""LongMemEval: session-level retrieval, as the official script measures it.

Questions that share a haystack share a project (the subset layout has one pool for all questions; the
official file gives each question its own, and identical haystacks are loaded once). Every turn of every
haystack session is an observation citing its event; retrieved memories become sessions (first
occurrence wins). Per question, at k = 5 and 10: ``recall_any@k`` (some answer session in the first k),
``recall_all@k`` (all of them) and ``ndcg@k``. Abstention questions are excluded, as the official
script excludes them; their number is reported.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from obsmem.eval.datasets.locomo import turns_of
from obsmem.eval.datasets.longmemeval import LongMemEvalData, LongMemEvalQuestion
from obsmem.eval.ingest import Citations, index_project, load_longmemeval_haystack
from obsmem.eval.metrics import ndcg, recall_all, recall_any
from obsmem.eval.modes import retrieve
from obsmem.eval.progress import SILENT, Progress
from obsmem.eval.results import ModeResult, Scores

from obsmem.surfaces.service import Obsmem

KS = (5, 10)
DATASET = "longmemeval"


@dataclass
class Haystack:
    project: str
    cites: Citations
    questions: list[LongMemEvalQuestion]


def scored_questions(data: LongMemEvalData) -> tuple[list[LongMemEvalQuestion], int]:
    """The questions the metrics count (not abstention, with answer sessions), and how many were left out."""
    kept = [q for q in data.questions if not q.abstention and q.answer_sessions]
    return kept, len(data.questions) - len(kept)


def load_haystacks(
    memory: Obsmem,
    data: LongMemEvalData,
    questions: Sequence[LongMemEvalQuestion],
    progress: Progress = SILENT,
    *,
    index: bool = True,
) -> tuple[list[Haystack], float, float]:
    groups: dict[tuple[str, ...], list[LongMemEvalQuestion]] = {}
    for question in questions:
        groups.setdefault(question.haystack, []).append(question)
    haystacks, ingest_s, index_s = [], 0.0, 0.0
    with progress.bar("longmemeval: ingest and index", len(groups), unit="haystack") as bar:
        for number, (session_ids, members) in enumerate(groups.items(), start=1):
            project = f"longmemeval-{number}"
            started = time.perf_counter()
            cites = load_longmemeval_haystack(memory, project, data, session_ids)
            ingest_s += time.perf_counter() - started
            started = time.perf_counter()
            if index:
                index_project(memory, project)
            index_s += time.perf_counter() - started
            haystacks.append(Haystack(project, cites, members))
            bar.update(1)
    return haystacks, ingest_s, index_s


def run_longmemeval(
    memory: Obsmem, haystacks: Sequence[Haystack], modes: Sequence[str], progress: Progress = SILENT
) -> list[ModeResult]:
    total = sum(len(h.questions) for h in haystacks)
    results = []
    for mode in modes:
        scores, latencies = Scores(), []
        started = time.perf_counter()
        with progress.bar(f"{DATASET}: {mode}", total) as bar:
            for haystack in haystacks:
                for question in haystack.questions:
                    retrieved = retrieve(memory, haystack.project, mode, question.text)
                    latencies.append(retrieved.seconds)
                    sessions = turns_of([haystack.cites.get(m, ()) for m in retrieved.ranking])
                    wanted = question.answer_sessions
                    values = {f"recall_any@{k}": recall_any(sessions, wanted, k) for k in KS}
                    values |= {f"recall_all@{k}": recall_all(sessions, wanted, k) for k in KS}
                    values |= {f"ndcg@{k}": ndcg(sessions, wanted, k) for k in KS}
                    scores.add(values, (question.category,))
                    bar.update(1)
        results.append(ModeResult.from_scores(mode, DATASET, scores, latencies, time.perf_counter() - started))
    return results
