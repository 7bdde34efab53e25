"""The harness with the bundled all-MiniLM-L6-v2 model, where results depend on the model (slow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from obsmem.eval.runner import evaluate_locomo, evaluate_questions, with_semantic
from obsmem.settings import load_settings

LOCOMO = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "locomo" / "locomo-dev5.json"


@pytest.mark.slow
def test_sample_questions_with_the_bundled_model(tmp_path: Path) -> None:
    settings = with_semantic(load_settings(data_dir=tmp_path / "unused"))
    run = evaluate_questions(settings, modes=("exact", "bm25", "vector", "hybrid"))
    by = {r.mode: r.metrics for r in run.results}
    exact = {r.mode: r.by_category for r in run.results}["exact"]
    assert exact["identifier"]["hit@10"] == 1.0 and exact["paraphrase"]["hit@10"] == 0.0
    assert by["hybrid"]["hit@10"] >= 0.8 and by["hybrid"]["hit@10"] >= by["bm25"]["hit@10"]
    # where a target can be lost: never after the fused candidates when it reached the top 20
    assert by["hybrid"]["candidates.fused@200"] >= by["hybrid"]["hit@20"]
    assert run.setup["embedding"] == "onnx:onnx-fp32-1:all-MiniLM-L6-v2"  # the default encoder
    assert not (tmp_path / "unused").exists()


@pytest.mark.slow
@pytest.mark.skipif(not LOCOMO.exists(), reason="the LoCoMo dev file is not next to the project")
def test_one_locomo_conversation_with_the_bundled_model(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path / "unused")
    run = evaluate_locomo(settings, LOCOMO, modes=("bm25", "vector", "hybrid"), conversations=["conv-26"])
    by = {(r.dataset, r.mode): r for r in run.results}
    turns, facts = by["locomo (a) turns", "hybrid"], by["locomo (b) observations", "hybrid"]
    assert turns.questions == facts.questions > 100
    for result in run.results:
        assert result.metrics["recall@50"] >= result.metrics["recall@10"] >= result.metrics["recall@5"] > 0.2
    assert by["locomo (a) turns", "vector"].metrics["recall@50"] > 0.5
