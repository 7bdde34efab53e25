"""The eval harness end to end on small datasets, through the real ingestion, indexing and search path.

Embeddings come from the loopback server (hashed bags of words: fast and deterministic); the real model
is exercised by the demo test and the slow LoCoMo test.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from obsmem.errors import ValidationFailed
from obsmem.eval.modes import Retrieved, parse_modes
from obsmem.eval.never_below import never_below_rows
from obsmem.eval.results import percentile
from obsmem.eval.runner import evaluate_locomo, evaluate_longmemeval, write_outputs
from obsmem.eval.suites.labelled import LabelledQuestion, parse_labelled, question_scores, read_labelled
from obsmem.settings import load_settings
from support.eval_datasets import write_locomo, write_longmemeval_official, write_longmemeval_subset
from support.model_server import ModelServer
from support.semantic_service import semantic_settings

ENTRY_KEYS = {"mode", "dataset", "questions", "metrics", "by_category", "latency_ms", "elapsed_s"}
PNG = b"\x89PNG\r\n\x1a\n"


def settings(tmp_path: Path, server: Any, **semantic: Any) -> Any:
    return load_settings(data_dir=tmp_path / "unused", semantic=semantic_settings(server, **semantic))


# -- metrics and parsing ------------------------------------------------------------------------------------


def test_labelled_question_scores_by_hand() -> None:
    target = "ab" * 32
    question = LabelledQuestion("q1", "positive", "why?", target[:12])  # a 12-hex prefix is enough
    ranking = ["c" * 64, "d" * 64, target, *("e" * 63 + str(i) for i in range(30))]
    values = question_scores(question, Retrieved(ranking, None, 0.0), {})
    assert values == {
        "hit@1": 0.0,
        "hit@5": 1.0,
        "hit@10": 1.0,
        "hit@20": 1.0,
        "mrr": pytest.approx(1 / 3),
        "ndcg@10": pytest.approx(1 / math.log2(4)),
    }
    late = question_scores(question, Retrieved(ranking[3:15] + [target], None, 0.0), {})
    assert late["hit@10"] == 0.0 and late["hit@20"] == 1.0 and late["ndcg@10"] == 0.0
    assert late["mrr"] == pytest.approx(1 / 13)
    negative = LabelledQuestion("q2", "negative", "nothing", None)
    assert question_scores(negative, Retrieved([], None, 0.0), {}) == {"negative_hit_rate": 0.0}
    assert question_scores(negative, Retrieved(["x"], None, 0.0), {}) == {"negative_hit_rate": 1.0}


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({"question": "q", "target_id": "ab" * 32}, "questions.0.label"),
        ({"label": "maybe", "question": "q"}, "questions.0.label"),
        ({"label": "positive", "question": "q"}, "questions.0.target_id"),
        ({"label": "positive", "question": "q", "target_id": "not hex"}, "questions.0.target_id"),
        ({"label": "negative", "question": "q", "target_id": "ab" * 32}, "questions.0.target_id"),
        ({"label": "negative", "question": ""}, "questions.0.question"),
        ({"label": "negative", "question": "q", "after": 5}, "questions.0.after"),
        ("a string", "questions.0"),
    ],
)
def test_bad_labelled_questions_name_the_field(item: Any, field: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_labelled([item])
    assert caught.value.field == field


def test_labelled_files_jsonl_or_json_list(tmp_path: Path) -> None:
    items = [
        {"label": "positive", "question": "q", "target_id": "AB" * 6, "split": "calibration"},
        {"label": "negative", "question": "n", "kind": "paraphrase"},
    ]
    lines = tmp_path / "q.jsonl"
    lines.write_text("\n".join(json.dumps(i) for i in items) + "\n\n", encoding="utf-8")
    listed = tmp_path / "q.json"
    listed.write_text(json.dumps(items), encoding="utf-8")
    assert read_labelled(lines) == read_labelled(listed)
    first = read_labelled(lines)[0]
    assert first.target_id == "ab" * 6 and first.split == "calibration" and first.case == "q1"
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"label": "negative", "question": "n"}\n{oops\n', encoding="utf-8")
    with pytest.raises(ValidationFailed, match="line 1"):
        read_labelled(broken)


def test_mode_lists_and_percentiles() -> None:
    assert parse_modes("exact, hybrid,exact") == ("exact", "hybrid")
    assert parse_modes("all")[-1] == "hybrid+rerank"
    for bad in ("", "fuzzy", "exact,,nope"):
        with pytest.raises(ValidationFailed):
            parse_modes(bad)
    assert percentile([], 0.5) == 0.0
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile(list(range(1, 101)), 0.95) == 95


# -- LoCoMo -----------------------------------------------------------------------------------------------


def test_locomo_both_ways_through_the_product(tmp_path: Path, model_server: ModelServer) -> None:
    data = write_locomo(tmp_path / "locomo.json")
    run = evaluate_locomo(
        settings(tmp_path, model_server), data, modes=("exact", "bm25", "vector", "hybrid"), work_dir=tmp_path / "work"
    )
    assert [(r.dataset, r.mode) for r in run.results] == [
        (dataset, mode)
        for dataset in ("locomo (a) turns", "locomo (b) observations")
        for mode in ("exact", "bm25", "vector", "hybrid")
    ]
    by = {(r.dataset, r.mode): r for r in run.results}
    for result in run.results:
        assert result.questions == 10  # 6 per conversation, one left without well-formed evidence
        assert set(result.by_category) <= {"multi-hop", "temporal", "open-domain", "single-hop", "adversarial"}
        assert all(0.0 <= value <= 1.0 for value in result.metrics.values())
        assert [result.metrics[f"recall@{k}"] for k in (5, 10, 25, 50)] == sorted(
            result.metrics[f"recall@{k}"] for k in (5, 10, 25, 50)
        )
    assert by["locomo (a) turns", "exact"].metrics["recall@50"] == 0.0  # no question is a literal substring
    # Ten turns per conversation: hybrid ranks all of them (the vector list holds every turn).
    assert by["locomo (a) turns", "hybrid"].metrics["recall@50"] == 1.0
    # Way (b) reaches only the turns some observation cites: per conversation 1, 1/2, 1, 1 and 0 -> 0.7.
    assert by["locomo (b) observations", "hybrid"].metrics["recall@50"] == pytest.approx(0.7)
    assert by["locomo (b) observations", "hybrid"].metrics["candidates.fused@200"] == pytest.approx(0.7)
    hybrid = by["locomo (a) turns", "hybrid"].metrics
    assert {"candidates.bm25@100", "candidates.vector@100", "candidates.fused@200"} <= set(hybrid)
    assert "candidates.fused@200" not in by["locomo (a) turns", "bm25"].metrics
    checked = never_below_rows(run.results)  # both ways, overall and per category, at k = 1, 5, 10
    assert {row.dataset for row in checked} == {"locomo (a) turns", "locomo (b) observations"}
    assert {row.metric for row in checked} == {"recall@1", "recall@5", "recall@10"}
    assert run.timings["index"] > 0 and run.timings["total"] >= run.timings["queries"]
    # every conversation is its own project, kept in the work directory
    assert sorted(p.name for p in (tmp_path / "work" / "projects").iterdir()) == [
        "locomo-conv-1-a",
        "locomo-conv-1-b",
        "locomo-conv-2-a",
        "locomo-conv-2-b",
    ]

    written = write_outputs(run, tmp_path / "out")
    assert {p.name for p in written} == {
        "results.json",
        "run.json",
        "report.md",
        "per_question.jsonl",
        "recall_curves.png",
        "categories.png",
        "latency.png",
    }
    records = [json.loads(line) for line in (tmp_path / "out" / "per_question.jsonl").read_text().splitlines()]
    assert len(records) == 8 * 10 and records[0]["question"] == "conv-1#0"
    assert set(records[0]) == {"dataset", "mode", "question", "groups", "metrics", "latency_ms"}
    assert records[0]["groups"] == ["single-hop"] and "recall@5" in records[0]["metrics"]
    entries = json.loads((tmp_path / "out" / "results.json").read_text())
    assert len(entries) == 8 and all(set(entry) == ENTRY_KEYS for entry in entries)
    assert set(entries[0]["latency_ms"]) == {"p50", "p95"}
    assert {"recall@5", "recall@10", "recall@25", "recall@50"} <= set(entries[0]["metrics"])
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## locomo (a) turns" in report and "| recall@10 |" in report and "## locomo (b) observations" in report
    assert (
        "## Never below its best single list" in report and "| locomo (b) observations | overall | recall@1 |" in report
    )
    for name in ("recall_curves.png", "categories.png", "latency.png"):
        assert (tmp_path / "out" / name).read_bytes().startswith(PNG)


def test_locomo_one_way_and_chosen_conversations(tmp_path: Path, model_server: ModelServer) -> None:
    data = write_locomo(tmp_path / "locomo.json")
    run = evaluate_locomo(
        settings(tmp_path, model_server), data, modes=("bm25",), ways=("b",), conversations=["conv-2"]
    )
    assert [(r.dataset, r.questions) for r in run.results] == [("locomo (b) observations", 5)]
    assert run.setup["index_events"] is False and "ways" not in run.setup
    # Ways over memories and over events run in services of their own: the setup keeps both.
    mixed = evaluate_locomo(
        settings(tmp_path, model_server), data, modes=("bm25",), ways=("b", "c"), conversations=["conv-2"]
    )
    assert {way: setup["index_events"] for way, setup in mixed.setup["ways"].items()} == {"b": False, "c": True}
    assert "index_events" not in mixed.setup and mixed.setup["bm25_tokenizer"] == run.setup["bm25_tokenizer"]
    with pytest.raises(ValidationFailed, match="conv-9"):
        evaluate_locomo(settings(tmp_path, model_server), data, modes=("bm25",), conversations=["conv-9"])


def test_rerank_mode_needs_a_reranker(tmp_path: Path, model_server: ModelServer) -> None:
    data = write_locomo(tmp_path / "locomo.json")
    with pytest.raises(ValidationFailed) as caught:
        evaluate_locomo(settings(tmp_path, model_server), data, modes=("hybrid+rerank",))
    assert caught.value.code == "mode_unavailable"


# -- LongMemEval ------------------------------------------------------------------------------------------


def test_longmemeval_official_file(tmp_path: Path, model_server: ModelServer) -> None:
    data = write_longmemeval_official(tmp_path / "lme.json")
    run = evaluate_longmemeval(settings(tmp_path, model_server), data, modes=("exact", "hybrid"))
    exact, hybrid = run.results
    assert exact.questions == hybrid.questions == 3  # the abstention question is left out
    assert set(hybrid.metrics) == {f"{m}@{k}" for m in ("recall_any", "recall_all", "ndcg") for k in (1, 5, 10)}
    # five sessions (or three) in a haystack: hybrid ranks them all, so every answer session is in the first five
    assert hybrid.metrics["recall_all@5"] == 1.0 and hybrid.metrics["recall_any@5"] == 1.0
    assert exact.metrics["recall_any@10"] == 0.0
    assert set(hybrid.by_category) == {"single-session-user"}
    assert any("1 left out" in note for note in run.notes)
    assert any("haystacks: 2" in note for note in run.notes)  # identical haystacks are loaded once


def test_longmemeval_subset_directory(tmp_path: Path, model_server: ModelServer) -> None:
    data = write_longmemeval_subset(tmp_path / "subset")
    run = evaluate_longmemeval(settings(tmp_path, model_server), data, modes=("bm25", "hybrid"))
    bm25, hybrid = run.results
    assert hybrid.questions == 2 and set(hybrid.by_category) == {"knowledge-update", "temporal-reasoning"}
    assert bm25.by_category["knowledge-update"]["recall_any@5"] == 1.0  # "pottery" names its session
    assert hybrid.metrics["recall_any@10"] == 1.0


def test_locomo_conversation_ways_search_the_events(tmp_path: Path, model_server: ModelServer) -> None:
    """Way (c) stores the turns as events and searches the conversation: the same documents as way (a), so
    the same recall; way (d) searches events and the dataset's observations together."""
    data = write_locomo(tmp_path / "locomo.json")
    modes = ("exact", "bm25", "vector", "hybrid")
    run = evaluate_locomo(
        settings(tmp_path, model_server), data, modes=modes, ways=("a", "c", "d"), work_dir=tmp_path / "work"
    )
    by = {(r.dataset, r.mode): r for r in run.results}
    assert sorted({r.dataset for r in run.results}) == [
        "locomo (a) turns",
        "locomo (c) events",
        "locomo (d) events+observations",
    ]
    for mode in modes:
        turns, events = by["locomo (a) turns", mode].metrics, by["locomo (c) events", mode].metrics
        for k in (5, 10, 25, 50):
            assert events[f"recall@{k}"] == pytest.approx(turns[f"recall@{k}"], abs=0.01), (mode, k)
    # Way (d) ranks every turn (events) and the observations citing some of them.
    assert by["locomo (d) events+observations", "hybrid"].metrics["recall@50"] == 1.0
    assert sorted(p.name for p in (tmp_path / "work" / "projects").iterdir()) == [
        f"locomo-conv-{n}-{way}" for n in (1, 2) for way in ("a", "c", "d")
    ]
