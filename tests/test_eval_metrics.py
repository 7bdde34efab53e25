"""Retrieval metrics: known values and invariants."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from obsmem.eval.metrics import ScoreTable, evidence_recall, evidence_recalls, ndcg, recall_all, recall_any


def test_evidence_recall_is_the_found_fraction() -> None:
    ranked = ["a", "b", "c", "d"]
    assert evidence_recall(ranked, {"b", "x"}, 1) == 0.0
    assert evidence_recall(ranked, {"b", "x"}, 2) == 0.5
    assert evidence_recall(ranked, {"b", "d"}, 4) == 1.0
    assert evidence_recall([], {"a"}, 10) == 0.0
    assert evidence_recalls(ranked, ["c"], (1, 5)) == {"recall@1": 0.0, "recall@5": 1.0}


def test_recall_any_and_all() -> None:
    ranked = ["s1", "s2", "s3"]
    assert recall_any(ranked, {"s3", "s9"}, 3) == 1.0
    assert recall_all(ranked, {"s3", "s9"}, 3) == 0.0
    assert recall_all(ranked, {"s1", "s2"}, 2) == 1.0


def test_ndcg_known_value() -> None:
    # one relevant item at rank 2 of two relevant: (1/log2 3) / (1 + 1/log2 3)
    expected = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    assert ndcg(["x", "a", "y"], {"a", "b"}, 3) == pytest.approx(expected)
    assert ndcg(["a", "b"], {"a", "b"}, 10) == pytest.approx(1.0)


def test_bad_arguments_are_errors() -> None:
    with pytest.raises(ValueError):
        evidence_recall(["a"], set(), 5)
    with pytest.raises(ValueError):
        recall_any(["a"], {"a"}, 0)


def test_score_table_means_by_category() -> None:
    table = ScoreTable()
    table.add("single-hop", {"recall@5": 1.0})
    table.add("single-hop", {"recall@5": 0.0})
    table.add("temporal", {"recall@5": 1.0})
    assert table.questions == 3
    assert table.means() == {"recall@5": pytest.approx(2 / 3)}
    assert table.category_means() == {"single-hop": {"recall@5": 0.5}, "temporal": {"recall@5": 1.0}}
    other = ScoreTable()
    other.add("temporal", {"recall@5": 0.0})
    assert ScoreTable().merge([table, other]).category_means()["temporal"] == {"recall@5": 0.5}


rankings = st.lists(st.integers(0, 30), unique=True, max_size=30)
relevant = st.sets(st.integers(0, 30), min_size=1, max_size=6)


@given(rankings, relevant, st.integers(1, 40), st.integers(0, 10))
def test_recalls_are_bounded_and_grow_with_k(ranked: list[int], wanted: set[int], k: int, more: int) -> None:
    for metric in (evidence_recall, recall_any, recall_all, ndcg):
        value = metric(ranked, wanted, k)
        assert 0.0 <= value <= 1.0 + 1e-12
    for metric in (evidence_recall, recall_any, recall_all):
        assert metric(ranked, wanted, k) <= metric(ranked, wanted, k + more)
    share = evidence_recall(ranked, wanted, k)
    assert recall_all(ranked, wanted, k) <= share <= recall_any(ranked, wanted, k)


@given(relevant)
def test_ideal_ranking_has_ndcg_one(wanted: set[int]) -> None:
    assert ndcg(sorted(wanted), wanted, len(wanted)) == pytest.approx(1.0)
