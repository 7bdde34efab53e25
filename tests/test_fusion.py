"""Fusion against small hand-computed examples."""

from __future__ import annotations

import pytest
from obsmem.retrieval.fusion import convex_fusion, fuser, reciprocal_rank_fusion
from obsmem.retrieval.ranked import RankedList


def lists() -> list[RankedList]:
    return [
        RankedList("bm25", [(10, 9.0), (20, 5.0), (30, 1.0)]),
        RankedList("vector", [(30, 0.9), (40, 0.8), (10, 0.1)]),
    ]


def test_rrf_hand_computed() -> None:
    # k = 60. Item 10: 1/61 + 1/63; item 30: 1/63 + 1/61 (a tie); item 20: 1/62; item 40: 1/62 (a tie).
    fused = reciprocal_rank_fusion(lists(), {"bm25": 1.0, "vector": 1.0}, 60)
    assert [label for label, _ in fused] == [10, 30, 20, 40]  # ties: best rank, then list order
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 63)
    assert fused[2][1] == pytest.approx(1 / 62)


def test_rrf_weights() -> None:
    # bm25 weight 2: 10 -> 2/61 + 1/63 = 0.04866; 30 -> 2/63 + 1/61 = 0.04814; 20 -> 2/62 = 0.03226;
    # 40 -> 1/62 = 0.01613.
    fused = reciprocal_rank_fusion(lists(), {"bm25": 2.0, "vector": 1.0}, 60)
    assert [label for label, _ in fused] == [10, 30, 20, 40]
    assert fused[1][1] == pytest.approx(2 / 63 + 1 / 61)
    # vector weight 0 turns that list off.
    assert [label for label, _ in reciprocal_rank_fusion(lists(), {"bm25": 1.0, "vector": 0.0}, 60)] == [
        10,
        20,
        30,
    ]


def test_rrf_small_k_example() -> None:
    # k = 1: 10 -> 1/2 + 1/4 = 0.75; 30 -> 1/4 + 1/2 = 0.75; 20 -> 1/3; 40 -> 1/3.
    fused = fuser("rrf", rrf_k=1)(lists(), {"bm25": 1, "vector": 1})
    assert [(label, round(score, 4)) for label, score in fused] == [
        (10, 0.75),
        (30, 0.75),
        (20, 0.3333),
        (40, 0.3333),
    ]


def test_convex_hand_computed() -> None:
    # bm25 normalised: 10 -> 1, 20 -> 0.5, 30 -> 0. vector: 30 -> 1, 40 -> 0.875, 10 -> 0.
    fused = convex_fusion(lists(), {"bm25": 1.0, "vector": 1.0})
    assert [(label, round(score, 4)) for label, score in fused] == [
        (10, 1.0),
        (30, 1.0),
        (40, 0.875),
        (20, 0.5),
    ]


def test_unknown_method() -> None:
    with pytest.raises(ValueError, match="unknown fusion method"):
        fuser("borda")
