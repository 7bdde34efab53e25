"""The plan-choice sample of PostgreSQL exact search answers what a full count of the sample answers: a
needle's occurrences, read only as far as the caller needs, and a short needle's from the counts made once
per sample."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from obsmem.retrieval.corpus import EVENTS, MEMORIES
from obsmem.retrieval.exact_postgres import TRIGRAM_ROWS_KEPT, WINDOW_MAX_STRETCH, NeedleSample, needle_trigrams

LETTERS = "abAB _%-é"
TEXT = st.text(alphabet=LETTERS, max_size=40)
_FOLD = str.maketrans("AB", "ab")


@given(
    texts=st.lists(TEXT, max_size=12),
    needle=st.text(alphabet=LETTERS, min_size=1, max_size=4),
    at_most=st.none() | st.integers(1, 8),
)
def test_occurrences_are_the_full_count_up_to_the_bound(texts: list[str], needle: str, at_most: int | None) -> None:
    sample = NeedleSample(texts, total_rows=1000)
    count = "\n".join(texts).translate(_FOLD).count(needle.translate(_FOLD))
    assert sample.occurrences(needle, at_most) == (count if at_most is None else min(count, at_most))


@given(texts=st.lists(TEXT, max_size=12), needle=st.text(alphabet=LETTERS, min_size=1, max_size=2))
def test_a_short_needles_occurrences_count_each_position_it_starts_at(texts: list[str], needle: str) -> None:
    sample = NeedleSample(texts, total_rows=1000)
    folded = needle.translate(_FOLD)
    starts = sum(1 for text in texts for i in range(len(text)) if text.translate(_FOLD).startswith(folded, i))
    assert sample.short_occurrences(needle) == starts


def test_a_needle_absent_from_the_sample_is_counted_zero_by_both_counts() -> None:
    sample = NeedleSample(["login", "session"], total_rows=10)
    assert sample.occurrences("qz", 5) == sample.short_occurrences("qz") == 0
    assert sample.frequency_of_needle("qz") == 0.25  # just under one occurrence, per row


@given(
    texts=st.lists(st.text(alphabet="ab1AB \n", max_size=30), max_size=40),
    needle=st.text(alphabet="ab1AB ", min_size=3, max_size=6),
)
def test_a_needle_counted_in_its_rare_trigrams_rows_is_counted_whole(texts: list[str], needle: str) -> None:
    sample = NeedleSample(texts, total_rows=1000)
    count = "\n".join(texts).translate(_FOLD).count(needle.translate(_FOLD))
    for trigram in needle_trigrams(needle):
        within = sample.occurrences_in_rows_of(trigram, needle)
        assert within is None or within == count


def test_a_trigram_in_more_rows_than_are_kept_leaves_the_count_to_the_whole_sample() -> None:
    common = NeedleSample(["abc"] * (TRIGRAM_ROWS_KEPT + 1), total_rows=100)
    assert common.occurrences_in_rows_of("abc", "abcd") is None
    rare = NeedleSample(["abcd abcd", "xyz", "ABCD"], total_rows=100)
    assert rare.occurrences_in_rows_of("bcd", "abcd") == 3


def test_a_window_boundary_within_the_sample_is_the_date_of_that_row() -> None:
    dates = ["2026-01-03 10:00:00", "2026-01-05 10:00:00", "2026-01-04 10:00:00", "2026-01-01 10:00:00"]
    sample = NeedleSample(["x"] * 4, total_rows=1000, dates=dates)
    assert sample.window_boundary(1, MEMORIES) == "2026-01-05 10:00:00"
    assert sample.window_boundary(3, MEMORIES) == "2026-01-03 10:00:00"


def test_a_window_boundary_beyond_the_sample_is_extrapolated_from_its_span_when_it_is_in_date_order() -> None:
    # 100 rows a minute apart (10:00 to 11:39), newest first: 400 rows reach back 400 minutes.
    dates = [f"2026-01-01 {(99 - i) // 60 + 10:02d}:{(99 - i) % 60:02d}:00" for i in range(100)]
    sample = NeedleSample(["x"] * 100, total_rows=10_000, dates=dates)
    assert sample.window_boundary(400, MEMORIES) == "2026-01-01 04:59:00"
    assert sample.window_boundary(400, EVENTS) == "2026-01-01T04:59:00"
    # One row dated decades off (misdated, or imported) moves neither the rate nor, past year 1, anything.
    outlier = NeedleSample(["x"] * 100, total_rows=10_000, dates=[*dates[:-1], "0001-01-01 00:00:00"])
    assert outlier.window_boundary(400, MEMORIES) == "2026-01-01 04:59:00"
    assert sample.window_boundary(100 * WINDOW_MAX_STRETCH + 1, MEMORIES) is None  # too far to estimate
    ancient = NeedleSample(["x"] * 40, total_rows=10_000, dates=[f"{9 - i // 4:04d}-01-01 00:00:00" for i in range(40)])
    assert ancient.window_boundary(4_000, MEMORIES) is None  # before year 1
    mixed = NeedleSample(["x"] * 40, total_rows=10_000, dates=[*["2026-01-02T00:00:00Z"] * 20, *["2026-01-01"] * 20])
    assert mixed.window_boundary(400, EVENTS) is None  # naive and aware stamps: no rate
    still = NeedleSample(["x"] * 40, total_rows=10_000, dates=["2026-01-01 00:00:00"] * 40)
    assert still.window_boundary(400, MEMORIES) is None  # every row at one instant: no rate either
    shuffled = NeedleSample(["x"] * 100, total_rows=10_000, dates=sorted(dates, key=lambda d: d[-5:-3]))
    assert shuffled.window_boundary(400, MEMORIES) is None  # written out of date order: no extrapolation
    odd = NeedleSample(["x"] * 2, total_rows=100, dates=["tomorrow", "today"])
    assert odd.window_boundary(5, MEMORIES) is None and odd.window_boundary(1, MEMORIES) == "tomorrow"
