"""The never-below check: hybrid against the better of its two lists at k = 1, 5, 10, overall and per
category; a loss fails the command (exit 3) unless ``--never-below warn``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from obsmem.eval.never_below import (
    never_below_dict,
    never_below_losses,
    never_below_markdown,
    never_below_rows,
    read_results,
)
from obsmem.eval.results import ModeResult
from obsmem.surfaces.cli import cli
from support.model_server import ModelServer


def result(mode: str, dataset: str, metrics: dict[str, float], groups: dict[str, dict[str, float]]) -> ModeResult:
    return ModeResult(mode, dataset, 10, metrics, groups, [1.0], 0.1)


def hits(one: float, five: float, ten: float) -> dict[str, float]:
    return {"hit@1": one, "hit@5": five, "hit@10": ten, "hit@20": 1.0, "mrr": 0.5}


def labelled_run(hybrid_paraphrase_at_5: float) -> list[ModeResult]:
    """bm25 wins identifiers, vector wins paraphrases; hybrid ties both except paraphrase hit@5 as given."""
    groups = {
        "bm25": {"identifier": hits(0.9, 1.0, 1.0), "paraphrase": hits(0.2, 0.4, 0.6), "negative": {"nhr": 1.0}},
        "vector": {"identifier": hits(0.5, 0.8, 0.9), "paraphrase": hits(0.4, 0.7, 0.8), "negative": {"nhr": 1.0}},
        "hybrid": {
            "identifier": hits(0.9, 1.0, 1.0),
            "paraphrase": hits(0.4, hybrid_paraphrase_at_5, 0.8),
            "negative": {"nhr": 1.0},
        },
    }
    overall = {"bm25": hits(0.55, 0.7, 0.8), "vector": hits(0.45, 0.75, 0.85), "hybrid": hits(0.65, 0.85, 0.9)}
    return [result(mode, "coding set", overall[mode], groups[mode]) for mode in ("exact", *groups) if mode in groups]


def test_a_hybrid_at_or_above_both_lists_passes() -> None:
    rows = never_below_rows(labelled_run(hybrid_paraphrase_at_5=0.7))
    # overall + identifier + paraphrase, k = 1, 5, 10; the negative category has no hit@k and is skipped
    assert [(r.group, r.metric) for r in rows] == [
        (group, f"hit@{k}") for group in ("overall", "identifier", "paraphrase") for k in (1, 5, 10)
    ]
    assert never_below_losses(rows) == []
    assert "at or above its best single list in all 9 comparisons" in never_below_markdown(rows)


def test_a_loss_in_one_category_is_caught_even_when_overall_wins() -> None:
    rows = never_below_rows(labelled_run(hybrid_paraphrase_at_5=0.65))
    (lost,) = never_below_losses(rows)
    assert (lost.dataset, lost.group, lost.metric) == ("coding set", "paraphrase", "hit@5")
    assert lost.best_list == 0.7 and lost.margin == pytest.approx(-0.05) and lost.verdict == "LOSS -0.050"
    table = never_below_markdown(rows)
    assert "| coding set | paraphrase | hit@5 | 0.400 | 0.700 | 0.650 | **LOSS -0.050** |" in table
    assert "falls below its best single list in 1 of 9 comparisons" in table
    assert never_below_dict(rows)["losses"] == 1


def test_each_dataset_is_checked_with_its_own_headline_metric() -> None:
    locomo = [
        result(mode, "locomo (a) turns", {"recall@1": v, "recall@5": v, "recall@10": v, "recall@25": 0.0}, {})
        for mode, v in (("bm25", 0.3), ("vector", 0.2), ("hybrid", 0.3))
    ]
    partial = [result("hybrid", "locomo (b) observations", {"recall@5": 0.1}, {})]  # no lists: not checkable
    rows = never_below_rows(locomo + partial)
    assert [(r.dataset, r.metric) for r in rows] == [("locomo (a) turns", f"recall@{k}") for k in (1, 5, 10)]
    assert never_below_rows(partial) == []


# -- the commands ----------------------------------------------------------------------------------------


def invoke(tmp_path: Path, *args: str, server: ModelServer | None = None) -> Result:
    base = ["--data-dir", str(tmp_path / "data")]
    if server is not None:
        cfg = tmp_path / "obsmem.toml"
        cfg.write_text(
            f'[semantic.embedding]\nprovider = "openai"\nbase_url = "{server.base_url}"\nmodel_id = "hashed-words"\n'
            "[semantic.index]\nbackground = false\n",
            encoding="utf-8",
        )
        base += ["--config", str(cfg)]
    return CliRunner().invoke(cli, [*base, "eval", *args])


def saved(tmp_path: Path, results: list[ModeResult], name: str = "results.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps([r.to_dict() for r in results]), encoding="utf-8")
    return path


def test_never_below_command_fails_on_a_loss(tmp_path: Path) -> None:
    losing = saved(tmp_path, labelled_run(hybrid_paraphrase_at_5=0.65))
    failed = invoke(tmp_path, "never-below", str(losing))
    assert failed.exit_code == 3, failed.output
    assert "LOSS -0.050" in failed.stdout and "paraphrase" in failed.stdout
    assert "error: never_below: hybrid falls below its best single list in 1 place(s): coding set paraphrase hit@5" in (
        failed.stderr
    )
    warned = invoke(tmp_path, "never-below", str(losing), "--never-below", "warn", "--json")
    assert warned.exit_code == 0, warned.output
    assert json.loads(warned.stdout)["losses"] == 1 and "warning: hybrid falls below" in warned.stderr


def test_never_below_command_passes_and_reads_several_files(tmp_path: Path) -> None:
    first = saved(tmp_path, labelled_run(hybrid_paraphrase_at_5=0.7), "a.json")
    second = saved(
        tmp_path,
        [
            result(m, "longmemeval", {"recall_any@1": 0.5, "recall_any@5": 0.9}, {})
            for m in ("bm25", "vector", "hybrid")
        ],
        "b.json",
    )
    passed = invoke(tmp_path, "never-below", str(first), str(second), "--json")
    assert passed.exit_code == 0, passed.output
    shown = json.loads(passed.stdout)
    assert shown["checked"] and shown["losses"] == 0
    assert {(row["dataset"], row["metric"]) for row in shown["rows"]} >= {
        ("coding set", "hit@10"),
        ("longmemeval", "recall_any@1"),
        ("longmemeval", "recall_any@5"),
    }


@pytest.mark.parametrize(
    ("content", "text"),
    [
        ("not json", "is not JSON"),
        ('{"mode": "hybrid"}', "must be a JSON list"),
        ('[{"mode": "hybrid", "dataset": "d", "metrics": {"hit@1": "high"}}]', "must map metric names to numbers"),
        ('[{"mode": "hybrid", "dataset": "d", "metrics": {"hit@1": 1.0}}]', "nothing to check"),
    ],
)
def test_never_below_command_bad_input(tmp_path: Path, content: str, text: str) -> None:
    path = tmp_path / "results.json"
    path.write_text(content, encoding="utf-8")
    result = invoke(tmp_path, "never-below", str(path))
    assert result.exit_code == 2, result.output
    assert text in result.stderr and "Traceback" not in result.output


def test_saved_results_read_back_as_written(tmp_path: Path) -> None:
    run = labelled_run(hybrid_paraphrase_at_5=0.65)
    back = read_results(saved(tmp_path, run))
    assert [(r.mode, r.metrics, r.by_category) for r in back] == [(r.mode, r.metrics, r.by_category) for r in run]


def test_an_eval_run_reports_the_check_and_its_exit_follows_it(tmp_path: Path, model_server: ModelServer) -> None:
    """A real run of the coding set in the three modes: the table is printed, the JSON carries every
    comparison, and the exit status is 3 exactly when a comparison is lost (0 with --never-below warn)."""
    out = tmp_path / "out"
    args = ("questions", "--set", "coding", "--modes", "bm25,vector,hybrid", "--output", str(out))
    run = invoke(tmp_path, *args, server=model_server)
    meta: dict[str, Any] = json.loads((out / "run.json").read_text())["never_below"]
    assert meta["checked"] and {row["group"] for row in meta["rows"]} >= {"overall", "held_out", "paraphrase"}
    assert len(meta["rows"]) == 8 * 3  # overall, 2 splits, 5 positive kinds; k = 1, 5, 10
    assert "never below: hybrid vs max(bm25, vector)" in run.stdout
    assert "## Never below its best single list" in (out / "report.md").read_text()
    if meta["losses"]:
        assert run.exit_code == 3 and "error: never_below:" in run.stderr
        warned = invoke(tmp_path, *args[:-2], "--never-below", "warn", server=model_server)
        assert warned.exit_code == 0 and "warning: hybrid falls below" in warned.stderr
    else:
        assert run.exit_code == 0 and "never_below" not in run.stderr
