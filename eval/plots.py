"""PNG plots of a run (matplotlib, no display needed): recall@k curves per mode, per-category bars and
the latency distribution per mode. One panel per dataset in each figure."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from obsmem.eval.report import AT_K, by_dataset, headline_family, metric_names
from obsmem.eval.results import ModeResult

PLOTS = ("recall_curves.png", "categories.png", "latency.png")


def _figure(panels: int, height: float = 3.6) -> tuple[Any, list[Any]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, max(panels, 1), figsize=(5.2 * max(panels, 1), height), squeeze=False)
    return figure, list(axes[0])


def _save(figure: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def recall_curves(results: Sequence[ModeResult], path: Path) -> Path:
    datasets = by_dataset(results)
    figure, axes = _figure(len(datasets))
    for axis, (dataset, group) in zip(axes, datasets.items(), strict=False):
        family = headline_family(group)
        names = [n for n in metric_names(group) if n.startswith(family) and AT_K.search(n)]
        ks = [int(AT_K.search(n).group(1)) for n in names]  # type: ignore[union-attr]
        for result in group:
            axis.plot(ks, [result.metrics.get(n, 0.0) for n in names], marker="o", label=result.mode)
        axis.set_title(dataset)
        axis.set_xlabel("k")
        axis.set_ylabel(family.rstrip("@") + "@k")
        axis.set_ylim(0, 1.02)
        axis.set_xticks(ks)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    return _save(figure, path)


def category_bars(results: Sequence[ModeResult], path: Path) -> Path:
    import numpy as np

    datasets = by_dataset(results)
    figure, axes = _figure(len(datasets), height=4.0)
    for axis, (dataset, group) in zip(axes, datasets.items(), strict=False):
        family = headline_family(group)
        metric = f"{family}10" if family.endswith("@") else family
        categories = sorted({c for r in group for c in r.by_category})
        width = 0.8 / max(len(group), 1)
        positions = np.arange(len(categories))
        for offset, result in enumerate(group):
            values = [result.by_category.get(c, {}).get(metric, 0.0) for c in categories]
            axis.bar(positions + offset * width, values, width, label=result.mode)
        axis.set_xticks(positions + width * (len(group) - 1) / 2)
        axis.set_xticklabels(categories, rotation=30, ha="right", fontsize=8)
        axis.set_title(f"{dataset}: {metric}")
        axis.set_ylim(0, 1.18)
        axis.legend(fontsize=7, loc="upper center", ncol=len(group), frameon=False)
    return _save(figure, path)


def latency_distribution(results: Sequence[ModeResult], path: Path) -> Path:
    datasets = by_dataset(results)
    figure, axes = _figure(len(datasets))
    for axis, (dataset, group) in zip(axes, datasets.items(), strict=False):
        data = [[max(value, 0.001) for value in result.latencies_ms] or [0.001] for result in group]
        axis.boxplot(data, showfliers=True)
        axis.set_xticks(range(1, len(group) + 1))
        axis.set_xticklabels([result.mode for result in group], fontsize=8)
        axis.set_yscale("log")
        axis.set_ylabel("latency per search (ms, log scale)")
        axis.set_title(dataset)
        axis.grid(alpha=0.3, axis="y")
    return _save(figure, path)


def write_plots(results: Sequence[ModeResult], output: Path) -> list[Path]:
    if not results:
        return []
    return [
        recall_curves(results, output / PLOTS[0]),
        category_bars(results, output / PLOTS[1]),
        latency_distribution(results, output / PLOTS[2]),
    ]
