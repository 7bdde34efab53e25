"""Reports: the side-by-side table of modes (markdown and a terminal table), per-category tables, and
(from :mod:`obsmem.eval.never_below`) the check that hybrid never falls below its best single list."""

from __future__ import annotations

import re
from collections.abc import Sequence
from statistics import fmean
from typing import TYPE_CHECKING, Any

from obsmem.eval.results import ModeResult

if TYPE_CHECKING:
    from rich.table import Table

    from obsmem.eval.runner import EvalRun

# Metric families in display order; a family's members sort by k.
_FAMILIES = ("hit@", "mrr", "recall@", "recall_any@", "recall_all@", "ndcg@", "negative_hit_rate", "candidates.")
AT_K = re.compile(r"@(\d+)$")
HEADLINE_FAMILIES = ("recall@", "hit@", "recall_any@")
SPLITS = ("calibration", "held_out")  # labelled questions get a full table per split


_STAGES = ("candidates.bm25", "candidates.vector", "candidates.fused")


def metric_key(name: str) -> tuple[int, int, str, int]:
    family = next((i for i, f in enumerate(_FAMILIES) if name.startswith(f)), len(_FAMILIES))
    stem = name.split("@")[0]
    stage = _STAGES.index(stem) if stem in _STAGES else 0
    match = AT_K.search(name)
    return family, stage, stem, int(match.group(1)) if match else 0


def metric_names(results: Sequence[ModeResult]) -> list[str]:
    names = {name for result in results for name in result.metrics}
    return sorted(names, key=metric_key)


def headline_family(results: Sequence[ModeResult]) -> str:
    """The metric family that sums a dataset up: ``recall@`` (LoCoMo), ``hit@`` (labelled questions) ..."""
    names = metric_names(results)
    return next((f for f in HEADLINE_FAMILIES if any(n.startswith(f) for n in names)), names[0] if names else "")


def by_dataset(results: Sequence[ModeResult]) -> dict[str, list[ModeResult]]:
    grouped: dict[str, list[ModeResult]] = {}
    for result in results:
        grouped.setdefault(result.dataset, []).append(result)
    return grouped


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def table_rows(results: Sequence[ModeResult]) -> list[list[str]]:
    """Rows of the side-by-side table of one dataset: a metric (or timing) and its value per mode."""
    rows = [["questions", *(str(r.questions) for r in results)]]
    for name in metric_names(results):
        rows.append([name, *(_cell(r.metrics.get(name)) for r in results)])
    rows.append(["latency p50 (ms)", *(f"{r.latency_ms['p50']:.1f}" for r in results)])
    rows.append(["latency p95 (ms)", *(f"{r.latency_ms['p95']:.1f}" for r in results)])
    rows.append(["elapsed (s)", *(f"{r.elapsed_s:.1f}" for r in results)])
    return rows


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def side_by_side_markdown(results: Sequence[ModeResult]) -> str:
    return markdown_table(["metric", *(r.mode for r in results)], table_rows(results))


def group_markdown(results: Sequence[ModeResult], group: str) -> str:
    """The side-by-side table of one group (a labelled split, a LoCoMo category), every metric."""
    names = sorted({n for r in results for n in r.by_category.get(group, {})}, key=metric_key)
    rows = [[name, *(_cell(r.by_category.get(group, {}).get(name)) for r in results)] for name in names]
    return markdown_table(["metric", *(r.mode for r in results)], rows)


def category_markdown(results: Sequence[ModeResult], metric: str) -> str:
    groups = sorted({group for r in results for group in r.by_category})
    rows = [[group, *(_cell(r.by_category.get(group, {}).get(metric)) for r in results)] for group in groups]
    return markdown_table([metric, *(r.mode for r in results)], rows)


def summary_markdown(results: Sequence[ModeResult]) -> str:
    """Every dataset and mode on one row each (LoCoMo's way (b) beside way (a)), headline metrics only."""
    family = headline_family(results)
    names = [n for n in metric_names(results) if n.startswith(family)]
    rows = [[r.dataset, r.mode, str(r.questions), *(_cell(r.metrics.get(n)) for n in names)] for r in results]
    return markdown_table(["dataset", "mode", "questions", *names], rows)


def split_kind_markdown(results: Sequence[ModeResult], ks: Sequence[int] = (1, 5, 10)) -> str | None:
    """``hit@k`` of each kind within each split (held-out paraphrases, say), from the per-question records:
    ``hit@1 / hit@5 / hit@10`` per mode. None when no question has both a split and a kind."""
    cells: dict[tuple[str, str], dict[str, list[dict[str, float]]]] = {}
    for result in results:
        for record in result.per_question:
            groups = record["groups"]
            if len(groups) < 2 or groups[0] not in SPLITS or f"hit@{ks[0]}" not in record["metrics"]:
                continue  # labelled records are grouped (split, kind); negatives have no hit@k
            cells.setdefault((groups[1], groups[0]), {}).setdefault(result.mode, []).append(record["metrics"])
    if not cells:
        return None
    header = ["kind", "split", "questions", *(r.mode for r in results)]
    rows = []
    for (kind, split), by_mode in sorted(cells.items()):
        shown = []
        for result in results:
            found = by_mode.get(result.mode, [])
            shown.append(" / ".join(_cell(fmean(m[f"hit@{k}"] for m in found) if found else None) for k in ks))
        rows.append([kind, split, str(max(len(found) for found in by_mode.values())), *shown])
    return markdown_table(header, rows)


def markdown_report(run: EvalRun) -> str:
    lines = [f"# obsmem eval: {run.suite}", ""]
    if run.command:
        lines += [f"Command: `{run.command}`", ""]
    if run.setup:
        lines += ["Setup: " + ", ".join(f"{k} = `{v}`" for k, v in run.setup.items()), ""]
    if run.timings:
        lines += ["Time (s): " + ", ".join(f"{k} {v:.1f}" for k, v in run.timings.items()), ""]
    lines += [f"- {note}" for note in run.notes]
    if len(by_dataset(run.results)) > 1:
        lines += ["", "## Summary", "", summary_markdown(run.results)]
    for dataset, results in by_dataset(run.results).items():
        family = headline_family(results)
        lines += ["", f"## {dataset}", "", side_by_side_markdown(results), ""]
        metric = f"{family}10" if family.endswith("@") else family
        lines += [f"### By category: {metric}", "", category_markdown(results, metric), ""]
        for split in SPLITS:
            if any(split in r.by_category for r in results):
                lines += [f"### Split: {split}", "", group_markdown(results, split), ""]
        crossed = split_kind_markdown(results) if family == "hit@" else None
        if crossed is not None:
            lines += ["### By kind and split: hit@1 / hit@5 / hit@10", "", crossed, ""]
    from obsmem.eval.never_below import never_below_markdown, never_below_rows

    rows = never_below_rows(run.results)
    if rows:
        lines += ["", "## Never below its best single list", "", never_below_markdown(rows), ""]
    lines += [
        "",
        "## Plots",
        "",
        "![recall at k per mode](recall_curves.png)",
        "",
        "![per category](categories.png)",
        "",
        "![latency per mode](latency.png)",
        "",
    ]
    return "\n".join(lines)


def rich_tables(results: Sequence[ModeResult]) -> list[Table]:
    """One terminal table per dataset, modes side by side."""
    from rich.table import Table

    tables = []
    for dataset, group in by_dataset(results).items():
        table = Table(title=dataset, title_justify="left")
        table.add_column("metric")
        for result in group:
            table.add_column(result.mode, justify="right")
        for row in table_rows(group):
            table.add_row(*row)
        tables.append(table)
    return tables


def summary_dict(run: EvalRun) -> dict[str, Any]:
    """``--json`` output: the results entries and the run's metadata (the never-below check included)."""
    return {"results": [r.to_dict() for r in run.results], **run.meta()}
