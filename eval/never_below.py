"""The never-below check: hybrid search must score at least as well as the better of its two lists.

Hybrid fuses the BM25 list and the vector list; if it ranks worse than one of them alone, fusion is
throwing that list's answer away. For every dataset of a run that has the ``bm25``, ``vector`` and
``hybrid`` modes, the check compares hybrid with ``max(bm25, vector)`` on the dataset's headline metric
(``hit@k`` for labelled questions, ``recall@k`` for LoCoMo, ``recall_any@k`` for LongMemEval) at
k = 1, 5 and 10, overall and in every category (labelled splits and kinds, LoCoMo categories,
LongMemEval question types). Any hybrid score below the better list, by any margin, is a loss: one
question lost is a question the product answers worse than a list it already computed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from obsmem.errors import ValidationFailed
from obsmem.eval.report import by_dataset, headline_family
from obsmem.eval.results import ModeResult

KS = (1, 5, 10)
OVERALL = "overall"
LISTS = ("bm25", "vector")
HYBRID = "hybrid"
# Scores are means over the same questions: equal scores can differ in the last bits of a float only.
TOLERANCE = 1e-9
CHECK_MODES = (*LISTS, HYBRID)


@dataclass(frozen=True)
class NeverBelowRow:
    """One comparison: a dataset, a group (``overall`` or a category) and a metric, in the three modes."""

    dataset: str
    group: str
    metric: str
    bm25: float
    vector: float
    hybrid: float

    @property
    def best_list(self) -> float:
        return max(self.bm25, self.vector)

    @property
    def loses(self) -> bool:
        return self.hybrid + TOLERANCE < self.best_list

    @property
    def margin(self) -> float:
        """Hybrid minus the better list (negative on a loss)."""
        return self.hybrid - self.best_list

    @property
    def verdict(self) -> str:
        return f"LOSS {self.margin:+.3f}" if self.loses else "ok"

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "group": self.group,
            "metric": self.metric,
            "bm25": round(self.bm25, 4),
            "vector": round(self.vector, 4),
            "hybrid": round(self.hybrid, 4),
            "loses": self.loses,
        }


def _value(result: ModeResult, group: str, metric: str) -> float | None:
    source = result.metrics if group == OVERALL else result.by_category.get(group, {})
    return source.get(metric)


def never_below_rows(results: Sequence[ModeResult], ks: Sequence[int] = KS) -> list[NeverBelowRow]:
    """Every comparison the run allows (datasets lacking one of the three modes are skipped), in order:
    dataset, then ``overall`` and the categories alphabetically, then k."""
    rows: list[NeverBelowRow] = []
    for dataset, results_of in by_dataset(results).items():
        modes = {result.mode: result for result in results_of}
        if any(mode not in modes for mode in CHECK_MODES):
            continue
        family = headline_family(results_of)
        groups = sorted({group for mode in CHECK_MODES for group in modes[mode].by_category})
        for group in (OVERALL, *groups):
            for k in ks:
                metric = f"{family}{k}"
                values = [_value(modes[mode], group, metric) for mode in CHECK_MODES]
                if any(value is None for value in values):
                    continue  # a category without this metric (labelled negatives have no hit@k)
                bm25, vector, hybrid = (float(value) for value in values if value is not None)
                rows.append(NeverBelowRow(dataset, group, metric, bm25, vector, hybrid))
    return rows


def never_below_losses(rows: Sequence[NeverBelowRow]) -> list[NeverBelowRow]:
    return [row for row in rows if row.loses]


def never_below_markdown(rows: Sequence[NeverBelowRow]) -> str:
    """The check as a markdown table and a one-line verdict."""
    lines = [
        "| dataset | group | metric | bm25 | vector | hybrid | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.dataset} | {r.group} | {r.metric} | {r.bm25:.3f} | {r.vector:.3f} | {r.hybrid:.3f} | "
        f"{'**' + r.verdict + '**' if r.loses else r.verdict} |"
        for r in rows
    ]
    return "\n".join(lines) + "\n\n" + verdict_line(rows)


def verdict_line(rows: Sequence[NeverBelowRow]) -> str:
    lost = never_below_losses(rows)
    if not rows:
        return "Never below: not checked (the run needs the bm25, vector and hybrid modes)."
    if not lost:
        return f"Never below: hybrid is at or above its best single list in all {len(rows)} comparisons."
    return (
        f"Never below: hybrid falls below its best single list in {len(lost)} of {len(rows)} comparisons: "
        + "; ".join(f"{r.dataset} {r.group} {r.metric} {r.hybrid:.3f} < {r.best_list:.3f}" for r in lost)
        + "."
    )


def never_below_dict(rows: Sequence[NeverBelowRow]) -> dict[str, Any]:
    """``--json`` and ``run.json``: whether it was checked, the number of losses, and every comparison."""
    return {"checked": bool(rows), "losses": len(never_below_losses(rows)), "rows": [row.to_dict() for row in rows]}


def never_below_table(rows: Sequence[NeverBelowRow]) -> Any:
    """The check as a terminal table, losses in bold red."""
    from rich.table import Table

    table = Table(title="never below: hybrid vs max(bm25, vector)", title_justify="left")
    for name in ("dataset", "group", "metric"):
        table.add_column(name)
    for name in ("bm25", "vector", "hybrid"):
        table.add_column(name, justify="right")
    table.add_column("verdict")
    for r in rows:
        table.add_row(
            r.dataset,
            r.group,
            r.metric,
            f"{r.bm25:.3f}",
            f"{r.vector:.3f}",
            f"{r.hybrid:.3f}",
            r.verdict,
            style="bold red" if r.loses else None,
        )
    return table


def _number_map(value: Any, where: str) -> dict[str, float]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) for k, v in value.items()
    ):
        raise ValidationFailed(f"{where} must map metric names to numbers", field="results")
    return {name: float(number) for name, number in value.items()}


def read_results(path: Path) -> list[ModeResult]:
    """The entries of a saved ``results.json`` (what ``--output`` writes), enough to check them again."""
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValidationFailed(f"cannot read {path.name} ({exc.strerror})", field="results") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ValidationFailed(f"{path.name} is not JSON", field="results") from None
    if not isinstance(entries, list):
        raise ValidationFailed(f"{path.name} must be a JSON list of results entries", field="results")
    results = []
    for index, entry in enumerate(entries):
        where = f"{path.name} entry {index}"
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("mode"), str)
            or not isinstance(entry.get("dataset"), str)
        ):
            raise ValidationFailed(f"{where} needs a mode and a dataset", field="results")
        groups = entry.get("by_category", {})
        if not isinstance(groups, dict):
            raise ValidationFailed(f"{where}.by_category must be an object", field="results")
        results.append(
            ModeResult(
                mode=entry["mode"],
                dataset=entry["dataset"],
                questions=int(entry.get("questions", 0)) if isinstance(entry.get("questions", 0), int) else 0,
                metrics=_number_map(entry.get("metrics", {}), f"{where}.metrics"),
                by_category={
                    str(group): _number_map(values, f"{where}.by_category.{group}") for group, values in groups.items()
                },
                latencies_ms=[],
                elapsed_s=0.0,
            )
        )
    return results
