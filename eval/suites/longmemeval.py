"""LongMemEval: session-level retrieval, as the official script measures it.

Questions that share a haystack share a project (the subset layout has one pool for all questions; the
official file gives each question its own, and identical haystacks are loaded once). Haystacks are
evaluated one at a time, every mode per question, so ``elapsed_s`` of a mode is its query time. Every turn of every
haystack session is an observation citing its event; retrieved memories become sessions (first
occurrence wins). Per question, at k = 1, 5 and 10: ``recall_any@k`` (some answer session in the first k),
``recall_all@k`` (all of them) and ``ndcg@k``. Abstention questions are excluded, as the official
script excludes them; their number is reported.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from obsmem.app import Obsmem
from obsmem.eval.datasets.locomo import turns_of
from obsmem.eval.datasets.longmemeval import LongMemEvalData, LongMemEvalQuestion
from obsmem.eval.ingest import index_project, load_longmemeval_haystack
from obsmem.eval.metrics import ndcg, recall_all, recall_any
from obsmem.eval.modes import retrieve
from obsmem.eval.progress import SILENT, Progress
from obsmem.eval.results import ModeResult, Scores

KS = (1, 5, 10)
DATASET = "longmemeval"


def scored_questions(data: LongMemEvalData) -> tuple[list[LongMemEvalQuestion], int]:
    """The questions the metrics count (not abstention, with answer sessions), and how many were left out."""
    kept = [q for q in data.questions if not q.abstention and q.answer_sessions]
    return kept, len(data.questions) - len(kept)


def question_scores(sessions: Sequence[str], wanted: Sequence[str]) -> dict[str, float]:
    values = {f"recall_any@{k}": recall_any(sessions, wanted, k) for k in KS}
    values |= {f"recall_all@{k}": recall_all(sessions, wanted, k) for k in KS}
    values |= {f"ndcg@{k}": ndcg(sessions, wanted, k) for k in KS}
    return values


@dataclass
class Timings:
    ingest: float = 0.0
    index: float = 0.0
    haystacks: int = 0


def run_longmemeval(
    memory: Obsmem,
    data: LongMemEvalData,
    questions: Sequence[LongMemEvalQuestion],
    modes: Sequence[str],
    progress: Progress = SILENT,
    *,
    index: bool = True,
) -> tuple[list[ModeResult], Timings]:
    """One haystack at a time: load it into its project, index it, ask its questions in every mode, then
    release the project (the official file has a haystack per question: hundreds of projects)."""
    groups: dict[tuple[str, ...], list[LongMemEvalQuestion]] = {}
    for question in questions:
        groups.setdefault(question.haystack, []).append(question)
    scores = {mode: Scores() for mode in modes}
    latencies: dict[str, list[float]] = {mode: [] for mode in modes}
    timings = Timings(haystacks=len(groups))
    with progress.bar(f"{DATASET}: {len(groups)} haystacks", len(questions)) as bar:
        for number, (session_ids, members) in enumerate(groups.items(), start=1):
            project = f"longmemeval-{number}"
            started = time.perf_counter()
            cites = load_longmemeval_haystack(memory, project, data, session_ids)
            timings.ingest += time.perf_counter() - started
            started = time.perf_counter()
            if index:
                index_project(memory, project)
            timings.index += time.perf_counter() - started
            for question in members:
                for mode in modes:
                    retrieved = retrieve(memory, project, mode, question.text)
                    latencies[mode].append(retrieved.seconds)
                    sessions = turns_of([cites.get(m, ()) for m in retrieved.ranking])
                    scores[mode].add(
                        question_scores(sessions, question.answer_sessions), (question.category,), question.id
                    )
                bar.update(1)
            memory.release(project)
    results = [
        ModeResult.from_scores(mode, DATASET, scores[mode], latencies[mode], sum(latencies[mode])) for mode in modes
    ]
    return results, timings
