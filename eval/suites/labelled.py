"""Labelled questions against one project: does search put the exact target memory near the top?

The format is the bundled sample project's ``questions.jsonl`` (one JSON object per line, or a JSON
list): ``label`` (``positive``/``negative``), ``question``, ``target_id`` (a positive's memory id: full
or a 12+ hex prefix), and optional ``case``, ``split`` (``calibration``/``held_out``), ``kind``,
``identifier`` (the literal an exact search should use), ``after``/``before`` (date bounds, applied in
every mode). Other fields are ignored.

A question whose answer spans several memories gives ``target_ids`` (a list of ids or prefixes) instead
of ``target_id``, and ``match``: ``all`` (the default: answered at the rank where the last of its targets
appears, so ``hit@k`` means every target is among the first k) or ``any`` (answered at its first target).

Per positive question: ``hit@1/5/10/20`` (answered within the first k hits), ``mrr`` (1/rank at which it
is answered, within the first 50, the most one search returns), ``ndcg@10`` (binary relevance over its
targets: 1/log2(rank + 1) for one target within the first ten). Per negative: ``negative_hit_rate`` (1
when the search returned anything). In the hybrid modes also ``candidates.<list>@<budget>``: the
question answered anywhere in the BM25 list, the vector list or the fused candidates, at their budgets —
where a target is lost.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from obsmem.app import Obsmem
from obsmem.errors import ValidationFailed
from obsmem.eval.modes import Retrieved, retrieve
from obsmem.eval.progress import SILENT, Progress
from obsmem.eval.results import ModeResult, Scores

HIT_KS = (1, 5, 10, 20)
MRR_DEPTH = 50
NDCG_K = 10
_HEX = re.compile(r"[0-9a-f]{12,64}")


@dataclass(frozen=True)
class LabelledQuestion:
    case: str
    label: str
    question: str
    target_id: str | None
    split: str = "all"
    kind: str = "question"
    identifier: str | None = None
    after: str | None = None
    before: str | None = None
    target_ids: tuple[str, ...] = ()
    match: str = "all"

    @property
    def targets(self) -> tuple[str, ...]:
        """Every target id (or prefix): ``target_ids`` when given, else ``target_id``; none for a negative."""
        if self.target_ids:
            return self.target_ids
        return () if self.target_id is None else (self.target_id,)

    @property
    def positive(self) -> bool:
        return self.label == "positive"

    def query(self, mode: str) -> str:
        """Exact mode searches the identifier when the question names one; every other mode the question."""
        return self.identifier if mode == "exact" and self.identifier else self.question

    def target_ranks(self, ranking: Sequence[str]) -> list[int | None]:
        """1-based rank of each target (a full id or a prefix of one) in ``ranking``, None where absent."""
        ranks: list[int | None] = []
        for target in self.targets:
            ranks.append(next((rank for rank, found in enumerate(ranking, start=1) if found.startswith(target)), None))
        return ranks

    def rank_of_target(self, ranking: Sequence[str]) -> int | None:
        """The rank at which ``ranking`` answers the question: its target's rank; with several targets,
        the last one's (``match`` all; None unless every target is there) or the first one's (``any``)."""
        ranks = self.target_ranks(ranking)
        found = [rank for rank in ranks if rank is not None]
        if not found or (self.match == "all" and len(found) < len(ranks)):
            return None
        return min(found) if self.match == "any" else max(found)


def _text(raw: dict[str, Any], name: str, where: str, *, required: bool = False) -> str | None:
    value = raw.get(name)
    if value is None:
        if required:
            raise ValidationFailed(f"{where}.{name} is required", field=f"{where}.{name}")
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValidationFailed(f"{where}.{name} must be a non-empty string", field=f"{where}.{name}")
    return value


def _target_ids(raw: dict[str, Any], where: str, label: str) -> tuple[str, ...]:
    """``target_ids``: a non-empty list of memory ids (or prefixes) for a positive; absent for a negative."""
    value = raw.get("target_ids")
    if value is None:
        return ()
    field = f"{where}.target_ids"
    if label == "negative":
        raise ValidationFailed(f"{field} must be absent for a negative", field=field)
    if raw.get("target_id") is not None:
        raise ValidationFailed(f"{where} gives both target_id and target_ids; give one", field=field)
    if not isinstance(value, list) or not value:
        raise ValidationFailed(f"{field} must be a non-empty list of memory ids", field=field)
    found = []
    for position, item in enumerate(value):
        if not isinstance(item, str) or not _HEX.fullmatch(item.lower()):
            raise ValidationFailed(
                f"{field}.{position} must be a memory id (12 to 64 hex characters)", field=f"{field}.{position}"
            )
        found.append(item.lower())
    return tuple(dict.fromkeys(found))


def _match(raw: dict[str, Any], where: str) -> str:
    value = raw.get("match", "all")
    if value not in ("all", "any"):
        raise ValidationFailed(f"{where}.match must be 'all' or 'any'", field=f"{where}.match")
    return str(value)


def parse_labelled(items: Sequence[Any]) -> list[LabelledQuestion]:
    """Validate labelled questions; an error names the item and field (``questions.3.target_id``)."""
    parsed = []
    for index, raw in enumerate(items):
        where = f"questions.{index}"
        if not isinstance(raw, dict):
            raise ValidationFailed(f"{where} must be an object", field=where)
        label = _text(raw, "label", where, required=True)
        if label not in ("positive", "negative"):
            raise ValidationFailed(f"{where}.label must be 'positive' or 'negative'", field=f"{where}.label")
        several = _target_ids(raw, where, label)
        target = _text(raw, "target_id", where, required=label == "positive" and not several)
        if target is not None:
            target = target.lower()
            if not _HEX.fullmatch(target):
                raise ValidationFailed(
                    f"{where}.target_id must be a memory id (12 to 64 hex characters)", field=f"{where}.target_id"
                )
            if label == "negative":
                raise ValidationFailed(f"{where}.target_id must be null for a negative", field=f"{where}.target_id")
        parsed.append(
            LabelledQuestion(
                case=str(raw.get("case") or f"q{index + 1}"),
                label=label,
                question=_text(raw, "question", where, required=True) or "",
                target_id=target,
                split=_text(raw, "split", where) or "all",
                kind=_text(raw, "kind", where) or "question",
                identifier=_text(raw, "identifier", where),
                after=_text(raw, "after", where),
                before=_text(raw, "before", where),
                target_ids=several,
                match=_match(raw, where),
            )
        )
    if not parsed:
        raise ValidationFailed("the questions file holds no questions", field="questions")
    return parsed


def read_labelled(path: Path) -> list[LabelledQuestion]:
    """A JSONL file (one question per line) or a JSON list."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValidationFailed(f"cannot read the questions file ({exc.strerror})", field="questions") from None
    try:
        stripped = text.lstrip()
        if stripped.startswith("["):
            items = json.loads(stripped)
        else:
            items = [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise ValidationFailed(
            f"the questions file is not JSON lines or a JSON list (line {exc.lineno})", field="questions"
        ) from None
    return parse_labelled(items)


def ndcg_at(ranks: Sequence[int | None], k: int) -> float:
    """Binary-relevance nDCG@k from the targets' ranks: found targets discounted by log2(rank + 1), over
    the ideal (every target at the top)."""
    gain = sum(1.0 / math.log2(rank + 1) for rank in ranks if rank is not None and rank <= k)
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(k, len(ranks)) + 1))
    return gain / ideal if ideal else 0.0


def question_scores(question: LabelledQuestion, retrieved: Retrieved, budgets: dict[str, int]) -> dict[str, float]:
    """The metrics of one question in one mode (see the module docstring)."""
    if not question.positive:
        return {"negative_hit_rate": float(bool(retrieved.ranking))}
    rank = question.rank_of_target(retrieved.ranking)
    values = {f"hit@{k}": float(rank is not None and rank <= k) for k in HIT_KS}
    values["mrr"] = 1.0 / rank if rank is not None and rank <= MRR_DEPTH else 0.0
    values[f"ndcg@{NDCG_K}"] = ndcg_at(question.target_ranks(retrieved.ranking), NDCG_K)
    stages = retrieved.stages
    if stages is not None and stages.bm25 is not None and stages.vector is not None:
        for name, ranking in (("bm25", stages.bm25), ("vector", stages.vector), ("fused", stages.fused)):
            values[f"candidates.{name}@{budgets[name]}"] = float(question.rank_of_target(ranking) is not None)
    return values


def candidate_budgets(memory: Obsmem) -> dict[str, int]:
    fusion = memory.settings.semantic.fusion if memory.settings.semantic is not None else None
    per_list = fusion.candidates_per_list if fusion else 0
    return {"bm25": per_list, "vector": per_list, "fused": fusion.fused_candidates if fusion else 0}


def run_labelled(
    memory: Obsmem,
    project: str,
    questions: Sequence[LabelledQuestion],
    modes: Sequence[str],
    *,
    dataset: str = "labelled questions",
    progress: Progress = SILENT,
) -> list[ModeResult]:
    """Every question in every mode; one :class:`ModeResult` per mode, grouped by split and kind."""
    budgets = candidate_budgets(memory)
    results = []
    for mode in modes:
        scores, latencies = Scores(), []
        started = time.perf_counter()
        with progress.bar(f"{dataset}: {mode}", len(questions)) as bar:
            for question in questions:
                retrieved = retrieve(
                    memory, project, mode, question.query(mode), after=question.after, before=question.before
                )
                latencies.append(retrieved.seconds)
                values = question_scores(question, retrieved, budgets)
                scores.add(values, (question.split, question.kind), question.case)
                bar.update(1)
        results.append(ModeResult.from_scores(mode, dataset, scores, latencies, time.perf_counter() - started))
    return results
