"""``obsmem eval``: the commands, their files, and clear errors for bad input (exit 2) or failures (exit 1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from obsmem import Obsmem
from obsmem.settings import load_settings
from obsmem.surfaces.cli import cli
from support.eval_datasets import CALIBRATION_MEMORIES, CALIBRATION_QUESTIONS, write_locomo, write_longmemeval_subset
from support.model_server import ModelServer
from support.semantic_service import add_memories

ENTRY_KEYS = {"mode", "dataset", "questions", "metrics", "by_category", "latency_ms", "elapsed_s"}


def config(tmp_path: Path, server: Any, *, reranker: bool = False) -> Path:
    text = f"""
[semantic.embedding]
provider = "openai"
base_url = "{server.base_url}"
model_id = "hashed-words"

[semantic.index]
background = false
publish_min_changes = 1
"""
    if reranker:
        text += f'\n[semantic.reranker]\nprovider = "http"\nbase_url = "{server.base_url}"\nmodel_id = "overlap"\n'
    path = tmp_path / "obsmem.toml"
    path.write_text(text, encoding="utf-8")
    return path


def invoke(tmp_path: Path, cfg: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--data-dir", str(tmp_path / "data"), "--config", str(cfg), "eval", *args])


@pytest.fixture
def project(tmp_path: Path, model_server: ModelServer) -> Path:
    """Project ``p`` with the calibration test's memories, and its labelled questions as a JSONL file."""
    settings = load_settings(config(tmp_path, model_server, reranker=True), data_dir=tmp_path / "data")
    with Obsmem(settings, background_indexing=False) as memory:
        ids = add_memories(memory, "p", [("2024-05-01 12:00", m) for m in CALIBRATION_MEMORIES])
    path = tmp_path / "questions.jsonl"
    lines = [
        {
            "case": f"q{i}",
            "label": "negative" if t is None else "positive",
            "question": text,
            "target_id": None if t is None else ids[t],
            "split": split,
            "kind": "paraphrase",
        }
        for i, (split, text, t) in enumerate(CALIBRATION_QUESTIONS)
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return path


def test_questions_on_a_project_with_every_mode_and_files(
    tmp_path: Path, model_server: ModelServer, project: Path
) -> None:
    cfg = config(tmp_path, model_server, reranker=True)
    out = tmp_path / "out"
    result = invoke(tmp_path, cfg, "questions", "--project", "p", "--questions", str(project), "--output", str(out))
    assert result.exit_code == 0, result.output
    for mode in ("exact", "bm25", "vector", "hybrid", "hybrid+rerank"):  # 'available' includes the reranker
        assert mode in result.stdout
    assert "hit@10" in result.stdout and "candidates.fused@200" in result.stdout
    entries = json.loads((out / "results.json").read_text())
    assert [e["mode"] for e in entries] == ["exact", "bm25", "vector", "hybrid", "hybrid+rerank"]
    assert all(set(e) == ENTRY_KEYS and e["questions"] == 10 for e in entries)
    assert {"calibration", "held_out", "paraphrase"} == set(entries[3]["by_category"])
    assert {"hit@1", "hit@5", "hit@10", "hit@20", "mrr", "ndcg@10", "negative_hit_rate"} <= set(entries[3]["metrics"])
    meta = json.loads((out / "run.json").read_text())
    assert meta["command"] == (
        f"obsmem --data-dir {tmp_path / 'data'} --config {cfg} eval questions --project p"
        f" --questions {project} --output {out}"
    )
    report = (out / "report.md").read_text()
    assert meta["suite"] == "questions" and "| hit@10 |" in report
    assert "### Split: calibration" in report and "### Split: held_out" in report
    assert all((out / name).stat().st_size > 0 for name in ("recall_curves.png", "categories.png", "latency.png"))


def test_questions_json_and_chosen_modes(tmp_path: Path, model_server: ModelServer, project: Path) -> None:
    cfg = config(tmp_path, model_server)
    result = invoke(
        tmp_path, cfg, "questions", "--project", "p", "--questions", str(project), "--modes", "exact,hybrid", "--json"
    )
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert [r["mode"] for r in shown["results"]] == ["exact", "hybrid"]
    assert shown["results"][1]["metrics"]["hit@10"] == 1.0


def test_the_bundled_sample_by_default(tmp_path: Path, model_server: ModelServer) -> None:
    cfg = config(tmp_path, model_server)
    result = invoke(tmp_path, cfg, "questions", "--modes", "exact,bm25", "--json")
    assert result.exit_code == 0, result.output
    exact, bm25 = json.loads(result.stdout)["results"]
    assert exact["questions"] == bm25["questions"] == 64
    assert exact["by_category"]["identifier"]["hit@10"] == 1.0  # every identifier question by its identifier
    assert not (tmp_path / "data").exists()  # a temporary data directory, never the user's


def test_calibrate_command(tmp_path: Path, model_server: ModelServer, project: Path) -> None:
    cfg = config(tmp_path, model_server, reranker=True)
    out = tmp_path / "cal"
    result = invoke(tmp_path, cfg, "calibrate", "--project", "p", "--questions", str(project), "--output", str(out))
    assert result.exit_code == 0, result.output
    assert "min_score" in result.stdout and "held-out" in result.stdout.lower()
    saved = json.loads((out / "calibration.json").read_text())
    assert saved["chosen_min_score"] is not None and saved["held_out"]["with_floor"]["negatives_with_hits"] == 0.0
    assert "[semantic.reranker]" in (out / "calibration.md").read_text()


def test_calibrate_without_a_reranker_chooses_min_relevance(
    tmp_path: Path, model_server: ModelServer, project: Path
) -> None:
    cfg = config(tmp_path, model_server)
    out = tmp_path / "cal"
    result = invoke(tmp_path, cfg, "calibrate", "--project", "p", "--questions", str(project), "--output", str(out))
    assert result.exit_code == 0, result.output
    assert "min_relevance" in result.stdout and "held-out" in result.stdout.lower()
    saved = json.loads((out / "calibration.json").read_text())
    assert saved["setting"] == "semantic.min_relevance" and saved["chosen_min_relevance"] is not None
    assert "[semantic]\nmin_relevance = " in (out / "calibration.md").read_text()


def test_calibrate_on_a_shipped_set(tmp_path: Path, model_server: ModelServer) -> None:
    from obsmem.eval.datasets.question_sets import question_set

    rows = question_set("coding").questions()
    cfg = config(tmp_path, model_server)
    result = invoke(tmp_path, cfg, "calibrate", "--set", "coding", "--max-recall-loss", "0.05", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    # The coding set's own splits: chosen on its calibration projects, measured on its held-out ones.
    assert report["calibration_questions"] == sum(row["split"] == "calibration" for row in rows)
    assert report["held_out_questions"] == sum(row["split"] == "held_out" for row in rows)
    assert report["setting"] == "semantic.min_relevance" and report["chosen_min_relevance"] is not None
    assert report["held_out"]["without_floor"]["negatives_with_hits"] == 1.0  # fused ranking answers them all
    assert not (tmp_path / "data").exists()  # a temporary data directory, never the user's


def test_locomo_and_longmemeval_commands(tmp_path: Path, model_server: ModelServer) -> None:
    cfg = config(tmp_path, model_server)
    data = write_locomo(tmp_path / "locomo.json")
    result = invoke(tmp_path, cfg, "locomo", "--data", str(data), "--ways", "a", "--modes", "bm25,hybrid", "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert [(r["dataset"], r["mode"]) for r in shown["results"]] == [
        ("locomo (a) turns", "bm25"),
        ("locomo (a) turns", "hybrid"),
    ]
    subset = write_longmemeval_subset(tmp_path / "subset")
    result = invoke(tmp_path, cfg, "longmemeval", "--data", str(subset), "--modes", "hybrid")
    assert result.exit_code == 0, result.output
    assert "recall_any@5" in result.stdout and "longmemeval" in result.stdout


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (["questions", "--modes", "fuzzy"], 2, "invalid_request: modes must be"),
        (["questions", "--modes", "hybrid+rerank"], 2, "mode_unavailable"),
        (["questions", "--project", "p"], 2, "--questions FILE"),
        (["questions", "--project", "nope", "--questions", "{questions}"], 1, "project_not_found"),
        (["questions", "--project", "p", "--questions", "{bad}"], 2, "questions.0.label"),
        (["calibrate", "--set", "nope"], 2, "no question set 'nope'"),
        (["calibrate", "--set", "coding", "--project", "p", "--questions", "{questions}"], 2, "drop --project"),
        (["locomo", "--data", "{bad}"], 2, "--data is not in the expected format"),
        (["locomo", "--data", "{questions}", "--ways", "e"], 2, "ways must be"),
        (["longmemeval", "--data", "{bad}"], 2, "--data is not in the expected format"),
    ],
)
def test_bad_input_is_a_clear_error(
    tmp_path: Path,
    model_server: ModelServer,
    project: Path,
    args: list[str],
    code: int,
    text: str,
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('[{"question": "no label"}]', encoding="utf-8")
    cfg = config(tmp_path, model_server)
    filled = [a.format(questions=project, bad=bad) for a in args]
    result = invoke(tmp_path, cfg, *filled)
    assert result.exit_code == code, result.output
    assert text in result.stderr and "Traceback" not in result.output
