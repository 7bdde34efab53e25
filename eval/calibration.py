"""Choosing a floor on the calibration split, and measuring it on the held-out split.

Two floors, one rule. With a reranker configured it is the reranker's ``min_score``: for each labelled
question the reranked ranking is taken without any floor, with each memory's raw score (its best
chunk's); a floor ``f`` keeps the memories scoring at least ``f``, in the same order — exactly what the
product does with ``min_score = f``, since a memory ranks where its best chunk does. Without a reranker
it is ``[semantic] min_relevance``, a floor on the fused evidence of the whole search (its best fused
score before smoothing): every memory of a question carries that one score, so a floor keeps the whole
ranking or nothing — exactly what the product does with ``min_relevance = f``.

On the calibration split, for each candidate floor (each score seen), three effects are computed over
the first ten hits: **precision** (targets shown / hits shown, pooled over positive questions),
**recall** (positives whose target is shown) and **negatives with hits** (negatives that still get any
hit). The rule: the highest floor whose recall is at least the unfloored recall minus
``max_recall_loss`` (default 0: lose no target), placed halfway down to the next lower score seen (for the
fused floor, not to a relevance of 0: a question with no evidence at all), so it does not sit on a
calibration score. The held-out split is then searched twice through the product — without a floor and
with the floor set to the choice — and both are reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from obsmem.app import Obsmem
from obsmem.errors import ValidationFailed
from obsmem.eval.modes import Retrieved, retrieve
from obsmem.eval.progress import SILENT, Progress
from obsmem.eval.suites.labelled import LabelledQuestion
from obsmem.retrieval import SearchPlan

FIRST = 10
UNFLOORED = SearchPlan(floor=False)
UNFLOORED_FUSED = SearchPlan(rerank=False, floor=False)
# The setting each kind of floor is (the TOML section and key it is written to).
RERANKER_FLOOR = "min_score"
FUSED_FLOOR = "min_relevance"
SECTIONS = {RERANKER_FLOOR: "semantic.reranker", FUSED_FLOOR: "semantic"}
MODES = {RERANKER_FLOOR: "hybrid+rerank", FUSED_FLOOR: "hybrid"}


@dataclass(frozen=True)
class Scored:
    """One question's unfloored reranked ranking and each memory's raw score."""

    question: LabelledQuestion
    ranking: list[str]
    scores: list[float]

    def shown(self, floor: float | None) -> list[str]:
        if floor is None:
            return self.ranking[:FIRST]
        return [m for m, s in zip(self.ranking, self.scores, strict=True) if s >= floor][:FIRST]


@dataclass(frozen=True)
class FloorEffect:
    floor: float | None
    precision_at_10: float
    recall_at_10: float
    negatives_with_hits: float
    hits_shown: int

    def row(self) -> dict[str, Any]:
        return {key: round(value, 4) if isinstance(value, float) else value for key, value in asdict(self).items()}


def effect(floor: float | None, shown: Sequence[tuple[LabelledQuestion, list[str]]]) -> FloorEffect:
    """Precision, recall and negatives with hits over the first ten hits of each question."""
    positives = [(q, hits) for q, hits in shown if q.positive]
    negatives = [(q, hits) for q, hits in shown if not q.positive]
    found = sum(1 for q, hits in positives if q.rank_of_target(hits) is not None)
    pooled = sum(len(hits) for _, hits in positives)
    return FloorEffect(
        floor=floor,
        precision_at_10=found / pooled if pooled else 0.0,
        recall_at_10=found / len(positives) if positives else 0.0,
        negatives_with_hits=sum(1 for _, hits in negatives if hits) / len(negatives) if negatives else 0.0,
        hits_shown=pooled + sum(len(hits) for _, hits in negatives),
    )


def searched(
    memory: Obsmem, project: str, question: LabelledQuestion, plan: SearchPlan | None, setting: str = RERANKER_FLOOR
) -> Retrieved:
    """One labelled question searched with its own date window, reranked or fused as ``setting`` says."""
    return retrieve(
        memory, project, MODES[setting], question.question, after=question.after, before=question.before, plan=plan
    )


def score_questions(
    memory: Obsmem,
    project: str,
    questions: Sequence[LabelledQuestion],
    progress: Progress = SILENT,
    setting: str = RERANKER_FLOOR,
) -> list[Scored]:
    scored = []
    plan = UNFLOORED if setting == RERANKER_FLOOR else UNFLOORED_FUSED
    with progress.bar(f"calibrate: {MODES[setting]} without a floor", len(questions)) as bar:
        for question in questions:
            got = searched(memory, project, question, plan, setting)
            assert got.stages is not None
            if setting == RERANKER_FLOOR:
                assert got.stages.rerank_scores is not None
                scores = got.stages.rerank_scores
            else:  # one score for the whole search: the floor keeps all of it or nothing
                best = got.stages.evidence
                scores = [best if best is not None else float("-inf")] * len(got.ranking)
            scored.append(Scored(question, got.ranking, scores))
            bar.update(1)
    return scored


def choose_floor(
    scored: Sequence[Scored], max_recall_loss: float = 0.0, no_evidence: float | None = None
) -> tuple[float | None, list[FloorEffect]]:
    """The rule of the module docstring; returns the floor (None when none keeps enough recall) and the
    sweep (one effect per candidate floor, highest floor first, the unfloored effect last).

    ``no_evidence``: a score that means "nothing at all" rather than a measure (the fused floor's 0, which
    a question naming what no memory holds gets); the floor keeps no margin from it. A reranker's raw
    scores have no such value (they are often negative)."""
    baseline = effect(None, [(s.question, s.shown(None)) for s in scored])
    candidates = sorted({score for s in scored for score in s.scores[:FIRST]}, reverse=True)
    sweep = [effect(f, [(s.question, s.shown(f)) for s in scored]) for f in candidates]
    if baseline.recall_at_10 == 0.0:
        return None, [*sweep, baseline]
    for position, found in enumerate(sweep):
        if found.recall_at_10 >= baseline.recall_at_10 - max_recall_loss - 1e-12:
            below = next((score for score in candidates[position + 1 :] if score != no_evidence), None)
            assert found.floor is not None
            floor = found.floor if below is None else (found.floor + below) / 2.0
            return floor, [*sweep, baseline]
    return None, [*sweep, baseline]


@dataclass
class CalibrationReport:
    """What ``obsmem eval calibrate`` found and measured."""

    chosen: float | None
    max_recall_loss: float
    calibration_questions: int
    held_out_questions: int
    calibration_sweep: list[FloorEffect] = field(default_factory=list)
    held_out_without_floor: FloorEffect | None = None
    held_out_with_floor: FloorEffect | None = None
    setting: str = RERANKER_FLOOR  # min_score (the reranker's) or min_relevance (the fused evidence)

    def to_dict(self) -> dict[str, Any]:
        return {
            "setting": f"{SECTIONS[self.setting]}.{self.setting}",
            f"chosen_{self.setting}": self.chosen,
            "max_recall_loss": self.max_recall_loss,
            "calibration_questions": self.calibration_questions,
            "held_out_questions": self.held_out_questions,
            "held_out": {
                "without_floor": self.held_out_without_floor.row() if self.held_out_without_floor else None,
                "with_floor": self.held_out_with_floor.row() if self.held_out_with_floor else None,
            },
            "calibration_sweep": [row.row() for row in self.calibration_sweep],
        }


def split_questions(questions: Sequence[LabelledQuestion]) -> tuple[list[LabelledQuestion], list[LabelledQuestion]]:
    calibration = [q for q in questions if q.split == "calibration"]
    held_out = [q for q in questions if q.split == "held_out"]
    if not calibration or not any(q.positive for q in calibration):
        raise ValidationFailed("calibration needs positive questions with split 'calibration'", field="questions")
    if not held_out:
        raise ValidationFailed("calibration needs questions with split 'held_out'", field="questions")
    return calibration, held_out


def measure_held_out(
    memory: Obsmem,
    project: str,
    held_out: Sequence[LabelledQuestion],
    plan: SearchPlan | None,
    floor: float | None,
    setting: str = RERANKER_FLOOR,
) -> FloorEffect:
    """Search the held-out split through the product (``plan`` None: the configured floor applies)."""
    shown = []
    for question in held_out:
        got = searched(memory, project, question, plan, setting)
        shown.append((question, got.ranking[:FIRST]))
    return effect(floor, shown)


def calibration_markdown(report: CalibrationReport) -> str:
    def cells(found: FloorEffect | None) -> str:
        if found is None:
            return "| - | - | - | - |"
        floor = "none" if found.floor is None else f"{found.floor:.4g}"
        return f"| {floor} | {found.precision_at_10:.3f} | {found.recall_at_10:.3f} | {found.negatives_with_hits:.3f} |"

    chosen = "no floor (none keeps the calibration recall)" if report.chosen is None else f"{report.chosen:.6g}"
    name = report.setting
    title = "Reranker floor calibration" if name == RERANKER_FLOOR else "Relevance floor calibration (no reranker)"
    lines = [
        f"## {title}",
        "",
        f"Chosen `{name}`: **{chosen}** (calibration questions: {report.calibration_questions}, "
        f"held-out questions: {report.held_out_questions}, allowed recall loss: {report.max_recall_loss}).",
        "",
        "Held-out split, searched through the product:",
        "",
        f"| | {name} | precision in first 10 | recall@10 | negatives with hits |",
        "|---|---|---|---|---|",
        "| without floor " + cells(report.held_out_without_floor),
        "| with the chosen floor " + cells(report.held_out_with_floor),
        "",
        "Calibration split, every candidate floor (highest first):",
        "",
        f"| {name} | precision in first 10 | recall@10 | negatives with hits |",
        "|---|---|---|---|",
        *(cells(row) for row in report.calibration_sweep),
    ]
    if report.chosen is not None:
        lines += ["", "To use it:", "", "```toml", f"[{SECTIONS[name]}]", f"{name} = {report.chosen:.6g}", "```"]
    return "\n".join(lines) + "\n"


def write_calibration(report: CalibrationReport, output: Path) -> list[Path]:
    import json

    output.mkdir(parents=True, exist_ok=True)
    paths = [output / "calibration.json", output / "calibration.md"]
    paths[0].write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
    paths[1].write_text(calibration_markdown(report), encoding="utf-8")
    return paths
