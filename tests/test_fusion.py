"""Fusion against small hand-computed examples."""

from __future__ import annotations

import math

import pytest

from obsmem.retrieval.bm25 import bm25_ceiling
from obsmem.retrieval.fusion import (
    convex_fusion,
    evidence,
    fuser,
    neighbour_smoothing,
    reciprocal_rank_fusion,
    session_pull,
)
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
    # 0.4 * bm25 / 9 + 0.6 * cosine, with the exact cosine of every candidate (20 is BM25-only):
    # 10: 0.4 * 1 + 0.6 * 0.1 = 0.46; 20: 0.4 * 5/9 + 0.6 * 0.3 = 0.40222; 30: 0.4 * 1/9 + 0.6 * 0.9 = 0.58444;
    # 40 (vector only, no BM25 match): 0.6 * 0.8 = 0.48.
    cosines = {10: 0.1, 20: 0.3, 30: 0.9, 40: 0.8}
    fused = convex_fusion(lists(), {"bm25": 0.4, "vector": 0.6}, cosines)
    assert [(label, round(score, 5)) for label, score in fused] == [
        (30, 0.58444),
        (40, 0.48),
        (10, 0.46),
        (20, 0.40222),
    ]
    # Without the exact cosines a BM25-only item counts 0 there: 20 -> 0.4 * 5/9 = 0.22222.
    plain = convex_fusion(lists(), {"bm25": 0.4, "vector": 0.6})
    assert [label for label, _ in plain] == [30, 40, 10, 20]
    assert plain[-1][1] == pytest.approx(0.4 * 5 / 9)
    # The cosine is raw, not rescaled over the candidates: a flat vector list moves little.
    flat = convex_fusion(lists(), {"bm25": 0.4, "vector": 0.6}, {10: 0.50, 20: 0.50, 30: 0.52, 40: 0.51})
    assert [label for label, _ in flat] == [10, 20, 30, 40]
    assert fuser("convex")(lists(), {"bm25": 0.4, "vector": 0.6}, cosines) == fused


def test_neighbour_smoothing_hand_computed() -> None:
    fused = convex_fusion(lists(), {"bm25": 0.4, "vector": 0.6}, {10: 0.1, 20: 0.3, 30: 0.9, 40: 0.8})
    beside = {10: [20], 20: [10, 50], 50: [20], 30: [40], 40: [30]}
    smoothed = neighbour_smoothing(fused, beside, 0.2)
    # 30: 0.58444 + 0.2 * 0.48 = 0.68044; 40: 0.48 + 0.2 * 0.58444 = 0.59689; 10: 0.46 + 0.2 * 0.40222 =
    # 0.54044; 20: 0.40222 + 0.2 * 0.46 = 0.49422; 50 (not a candidate) enters with 0.2 * 0.40222 = 0.08044.
    assert [(label, round(score, 5)) for label, score in smoothed] == [
        (30, 0.68044),
        (40, 0.59689),
        (10, 0.54044),
        (20, 0.49422),
        (50, 0.08044),
    ]
    assert neighbour_smoothing(fused, beside, 0.0) == fused
    # A neighbour whose only neighbour scores below zero does not enter; negative scores are not lifted.
    assert neighbour_smoothing([(1, -0.1)], {1: [2], 2: [1]}, 0.2) == [(1, -0.1)]


def test_unknown_method() -> None:
    with pytest.raises(ValueError, match="unknown fusion method"):
        fuser("borda")


def test_bm25_ceiling_is_fts5_idf_times_k1_plus_one() -> None:
    # 100 chunks; a term in 4 of them: idf = log(96.5 / 4.5); a term in none: log(100.5 / 0.5).
    expected = 2.2 * (math.log(96.5 / 4.5) + math.log(100.5 / 0.5))
    assert bm25_ceiling([4, 0], 100) == pytest.approx(expected)
    # A term in most chunks has a negative idf, which FTS5 clamps to 1e-6; so does this bound.
    assert bm25_ceiling([90], 100) == pytest.approx(2.2e-6)
    assert bm25_ceiling([], 100) == 0.0


def test_convex_divides_bm25_by_the_ceiling_so_one_common_word_earns_little() -> None:
    # A paraphrase: the keyword list's only match (10) shares one common word with the question, whose
    # ceiling (what a chunk matching every term could score) is 20; the vector list's first item (30) is
    # the answer. Divided by its best score, 10 would get the whole BM25 weight:
    # 1.5 * 1 + 0.6 * 0.35 = 1.71 against 30's 0.6 * 0.62 = 0.372. Divided by the ceiling it gets
    # 1.5 * 2/20 + 0.6 * 0.35 = 0.36, and the answer comes first.
    keyword = RankedList("bm25", [(10, 2.0)])
    vector = RankedList("vector", [(30, 0.62), (10, 0.35)])
    by_best = convex_fusion([keyword, vector], {"bm25": 1.5, "vector": 0.6})
    assert [label for label, _ in by_best] == [10, 30]
    keyword.ceiling = 20.0
    by_ceiling = convex_fusion([keyword, vector], {"bm25": 1.5, "vector": 0.6})
    assert by_ceiling == [(30, pytest.approx(0.372)), (10, pytest.approx(0.36))]
    # A match of most of the question still wins against a closer cosine.
    keyword.items = [(10, 15.0)]
    assert [label for label, _ in convex_fusion([keyword, vector], {"bm25": 1.5, "vector": 0.6})] == [10, 30]


def test_evidence_is_the_best_fused_score() -> None:
    assert evidence([(3, 0.2), (1, 0.7), (2, 0.5)]) == 0.7
    assert evidence([]) is None


def test_a_keyword_list_whose_best_match_covers_little_of_the_query_weighs_less() -> None:
    # Ceiling 20, best match 1.0: it covers 0.05 of what the query could score, a quarter of full_coverage
    # 0.2, so the BM25 weight 1.25 becomes 0.3125: 10 scores 0.3125 * 1/20 + 0.6 * 0.5 = 0.31563, 30
    # (vector only) 0.6 * 0.52 = 0.312. Without the rule 10 gets 1.25 * 1/20 + 0.3 = 0.3625.
    keyword = RankedList("bm25", [(10, 1.0)], ceiling=20.0)
    vector = RankedList("vector", [(30, 0.52), (10, 0.5)])
    weights = {"bm25": 1.25, "vector": 0.6}
    assert convex_fusion([keyword, vector], weights) == [(10, pytest.approx(0.3625)), (30, pytest.approx(0.312))]
    shrunk = convex_fusion([keyword, vector], weights, full_coverage=0.2)
    assert shrunk == [(10, pytest.approx(0.315625)), (30, pytest.approx(0.312))]
    # A best match covering more than full_coverage keeps the whole weight.
    keyword.items = [(10, 5.0)]
    assert convex_fusion([keyword, vector], weights, full_coverage=0.2) == convex_fusion([keyword, vector], weights)
    assert fuser("convex", full_coverage=0.2)([keyword, vector], weights) == convex_fusion(
        [keyword, vector], weights, full_coverage=0.2
    )


def test_session_pull_hand_computed() -> None:
    """Each candidate moves the share of the way up to its session's best; the session with the strongest
    match lifts its weaker memories past a lone match of another session, and no session's best moves."""
    fused = [(1, 0.9), (2, 0.5), (3, 0.45), (6, 0.44), (4, 0.3), (5, 0.2)]  # best first, as fusion gives it
    sessions = {1: "a", 2: "b", 3: "a", 4: "a", 5: None, 6: "c"}
    pulled = dict(session_pull(fused, sessions, 0.3))
    assert pulled[1] == 0.9 and pulled[2] == 0.5 and pulled[6] == 0.44  # each session's best stays
    assert pulled[3] == pytest.approx(0.45 + 0.3 * (0.9 - 0.45))
    assert pulled[4] == pytest.approx(0.3 + 0.3 * (0.9 - 0.3))
    assert pulled[5] == 0.2  # no session: nothing to pull toward
    assert [label for label, _ in session_pull(fused, sessions, 0.3)] == [1, 3, 2, 4, 6, 5]
    assert session_pull(fused, sessions, 0.0) == fused
    # One session: every score moves toward the same best, so the order cannot change.
    alone = {label: "a" for label, _ in fused}
    assert [label for label, _ in session_pull(fused, alone, 0.5)] == [label for label, _ in fused]
