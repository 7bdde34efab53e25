"""Reranker floor calibration against a real HTTP reranker on 127.0.0.1 (word-overlap scores)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from obsmem import Obsmem
from obsmem.errors import ValidationFailed
from obsmem.eval.calibration import Scored, choose_floor, effect
from obsmem.eval.runner import calibrate
from obsmem.eval.suites.labelled import LabelledQuestion
from obsmem.settings import load_settings
from support.eval_datasets import CALIBRATION_MEMORIES, CALIBRATION_QUESTIONS
from support.model_server import ModelServer, overlap_score
from support.semantic_service import add_memories, semantic_settings


def reranker_settings(tmp_path: Path, server: Any, **reranker: Any) -> Any:
    section = semantic_settings(
        server, reranker={"provider": "http", "base_url": server.base_url, "model_id": "overlap"} | reranker
    )
    return load_settings(data_dir=tmp_path / "data", semantic=section)


def labelled(ids: list[str]) -> list[LabelledQuestion]:
    return [
        LabelledQuestion(
            f"q{i}",
            "negative" if target is None else "positive",
            text,
            None if target is None else ids[target],
            split=split,
        )
        for i, (split, text, target) in enumerate(CALIBRATION_QUESTIONS)
    ]


def test_choose_floor_rule_by_hand() -> None:
    positive = LabelledQuestion("a", "positive", "q", "aa" * 6)
    other = LabelledQuestion("b", "positive", "q", "bb" * 6)
    negative = LabelledQuestion("c", "negative", "q", None)
    scored = [
        Scored(positive, ["aa" * 32, "cc" * 32], [9.0, 2.0]),
        Scored(other, ["dd" * 32, "bb" * 32, "ee" * 32], [7.0, 4.0, 1.0]),
        Scored(negative, ["ff" * 32], [3.0]),
    ]
    floor, sweep = choose_floor(scored)
    assert floor == 3.5  # the lowest target score that keeps recall is 4; the next score seen below is 3
    assert sweep[-1].floor is None and sweep[-1].recall_at_10 == 1.0
    kept = effect(floor, [(s.question, s.shown(floor)) for s in scored])
    assert kept.recall_at_10 == 1.0 and kept.negatives_with_hits == 0.0
    assert kept.precision_at_10 == pytest.approx(2 / 3) and sweep[-1].precision_at_10 == pytest.approx(2 / 5)
    loose, _ = choose_floor(scored, max_recall_loss=0.5)
    assert loose == 8.0  # giving up half the recall allows a floor between 9 and 7
    nothing = [Scored(positive, ["cc" * 32], [1.0])]
    assert choose_floor(nothing)[0] is None  # no target found: no floor can keep recall


def test_calibrate_through_a_loopback_reranker(tmp_path: Path, model_server: ModelServer) -> None:
    settings = reranker_settings(tmp_path, model_server)
    with Obsmem(settings, background_indexing=False) as memory:
        ids = add_memories(
            memory, "p", [(f"2024-05-0{1 + i % 8} 12:00", m) for i, m in enumerate(CALIBRATION_MEMORIES)]
        )
    questions = labelled(ids)
    report = calibrate(settings, questions=questions, project="p")
    assert report.calibration_questions == 5 and report.held_out_questions == 5
    # The floor sits halfway between the lowest target score on the calibration split and the next lower
    # score seen there.
    calibration = [q for q in questions if q.split == "calibration"]
    targets = [
        overlap_score(q.question, CALIBRATION_MEMORIES[ids.index(q.target_id)]) for q in calibration if q.positive
    ]
    seen = {overlap_score(q.question, m) for q in calibration for m in CALIBRATION_MEMORIES}
    lowest = min(targets)
    assert report.chosen == (lowest + max(s for s in seen if s < lowest)) / 2
    before, after = report.held_out_without_floor, report.held_out_with_floor
    assert before is not None and after is not None
    assert before.recall_at_10 == after.recall_at_10 == 1.0
    assert before.negatives_with_hits == 1.0 and after.negatives_with_hits == 0.0
    assert after.precision_at_10 > before.precision_at_10
    payload = report.to_dict()
    assert payload["chosen_min_score"] == report.chosen and payload["held_out"]["with_floor"]["recall_at_10"] == 1.0


def test_calibrate_without_a_reranker_floors_the_fused_evidence(tmp_path: Path, model_server: ModelServer) -> None:
    settings = load_settings(data_dir=tmp_path / "data", semantic=semantic_settings(model_server))
    with Obsmem(settings, background_indexing=False) as memory:
        ids = add_memories(
            memory, "p", [(f"2024-05-0{1 + i % 8} 12:00", m) for i, m in enumerate(CALIBRATION_MEMORIES)]
        )
    report = calibrate(settings, questions=labelled(ids), project="p")
    assert report.setting == "min_relevance" and report.chosen is not None
    # Every calibration positive keeps its hits (no recall loss allowed), and the floor sits below the
    # weakest of them: the sweep's rows at or above the chosen floor keep the unfloored recall.
    unfloored = report.calibration_sweep[-1]
    kept = [row for row in report.calibration_sweep[:-1] if row.floor is not None and row.floor >= report.chosen]
    assert kept and all(row.recall_at_10 == unfloored.recall_at_10 for row in kept[-1:])
    before, after = report.held_out_without_floor, report.held_out_with_floor
    assert before is not None and after is not None
    assert after.negatives_with_hits <= before.negatives_with_hits
    assert report.to_dict()["chosen_min_relevance"] == report.chosen
    # Through the product: a question below the floor gets no hits and says so.
    floored = settings.model_copy(
        update={"semantic": settings.semantic.model_copy(update={"min_relevance": 10.0})}  # above any score
    )
    with Obsmem(floored, background_indexing=False) as memory:
        result = memory.search("p", CALIBRATION_QUESTIONS[0][1], mode="hybrid")
    assert result.hits == [] and result.nothing_close
    assert "does not prove" in result.to_dict()["note"]


def test_calibrate_needs_semantic_search_and_both_splits(tmp_path: Path, model_server: ModelServer) -> None:
    plain = load_settings(data_dir=tmp_path / "data")
    with pytest.raises(ValidationFailed) as caught:
        calibrate(plain, questions=[], project="p")
    assert caught.value.code == "mode_unavailable"
    settings = reranker_settings(tmp_path, model_server)
    with Obsmem(settings, background_indexing=False) as memory:
        ids = add_memories(memory, "p", [("2024-05-01 12:00", m) for m in CALIBRATION_MEMORIES])
    only_held_out = [q for q in labelled(ids) if q.split == "held_out"]
    with pytest.raises(ValidationFailed, match="calibration"):
        calibrate(settings, questions=only_held_out, project="p")
    with pytest.raises(ValidationFailed, match="between 0 and 1"):
        calibrate(settings, questions=labelled(ids), project="p", max_recall_loss=2.0)


def test_a_floor_keeps_its_margin_from_real_scores_not_from_no_evidence() -> None:
    """A relevance of 0 (a question naming what no memory holds, with the ``+names`` measure) is no score to
    place the fused floor halfway to: the floor stays beside the lowest real score below the chosen one."""
    positive = LabelledQuestion("a", "positive", "q", "aa" * 6)
    named = LabelledQuestion("b", "negative", "q", None)
    near = LabelledQuestion("c", "negative", "q", None)
    scored = [
        Scored(positive, ["aa" * 32], [0.6]),
        Scored(named, ["ff" * 32], [0.0]),
        Scored(near, ["ee" * 32], [0.4]),
    ]
    assert choose_floor(scored, no_evidence=0.0)[0] == pytest.approx(0.5)
    without_near = scored[:2]
    assert choose_floor(without_near, no_evidence=0.0)[0] == pytest.approx(0.6)  # nothing real below
    assert choose_floor(without_near)[0] == pytest.approx(0.3)  # without the marker, 0 is a score like others


def test_a_reranker_floor_keeps_its_margin_from_negative_scores() -> None:
    """Raw reranker scores are often negative: each is a score to keep a margin from."""
    positive = LabelledQuestion("a", "positive", "q", "aa" * 6)
    negative = LabelledQuestion("c", "negative", "q", None)
    scored = [Scored(positive, ["aa" * 32], [-1.0]), Scored(negative, ["ff" * 32], [-4.0])]
    assert choose_floor(scored)[0] == pytest.approx(-2.5)
