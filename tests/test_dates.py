"""Date bounds: real calendar values only, inclusive whole days and whole minutes."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from obsmem.dates import parse_timestamp, parse_window
from obsmem.errors import InvalidDate


def test_date_only_bounds_cover_the_whole_day() -> None:
    window = parse_window("2026-03-01", "2026-03-01")
    assert (window.lower, window.upper) == ("2026-03-01 00:00:00", "2026-03-01 23:59:59")


def test_minute_before_bound_includes_that_minute() -> None:
    window = parse_window(None, "2026-03-01 10:15")
    assert window.upper == "2026-03-01 10:15:59"
    assert window.contains("2026-03-01 10:15:42") and not window.contains("2026-03-01 10:16:00")


def test_leap_day_and_year_end() -> None:
    assert parse_window("2024-02-29", "2024-12-31").upper == "2024-12-31 23:59:59"
    assert parse_window(None, "9999-12-31").upper == "9999-12-31 23:59:59"


@pytest.mark.parametrize(
    ("after", "before", "field"),
    [
        ("2026-02-30", None, "after"),
        ("2023-02-29", None, "after"),
        (None, "2026-01-01 24:00", "before"),
        (None, "2026-01-01 10:60", "before"),
        ("2026-01-01T10:00", None, "after"),
        ("2026-01-01 10:00Z", None, "after"),
        ("2026-01-01 10:00+02:00", None, "after"),
        ("2026-1-1", None, "after"),
        ("0000-01-01", None, "after"),
        (20260101, None, "after"),
        ("２０２６-01-01", None, "after"),
        ("2026-03-02", "2026-03-01", "after"),
        ("2026-03-01 10:01", "2026-03-01 10:00", "after"),
    ],
)
def test_invalid_bounds_name_the_field(after: object, before: object, field: str) -> None:
    with pytest.raises(InvalidDate) as caught:
        parse_window(after, before)
    assert caught.value.field == field and caught.value.status == 422


def test_equal_minute_bounds_are_allowed() -> None:
    window = parse_window("2026-03-01 10:00", "2026-03-01 10:00")
    assert window.contains("2026-03-01 10:00:30")


def minute_text(moment: datetime) -> str:
    """``YYYY-MM-DD HH:MM`` with a four-digit year, whatever the C library's ``strftime`` pads."""
    return f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d} {moment.hour:02d}:{moment.minute:02d}"


@given(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 30)))
def test_any_real_minute_round_trips(moment: datetime) -> None:
    text = minute_text(moment)
    assert parse_timestamp(text) == text
    window = parse_window(text, text)
    assert window.lower == text + ":00" and window.upper == text + ":59"
    day = text[:10]
    whole = parse_window(day, day)
    assert whole.contains(text + ":00")
    assert not whole.contains(minute_text(moment + timedelta(days=1))[:10] + " 00:00:00")


def test_years_before_1000_keep_four_digits_so_they_compare_as_dates() -> None:
    """Stored dates compare as text: a bound written ``999-12-31`` would sort after every ``2025-...``."""
    window = parse_window("0999-01-01", "0999-12-31")
    assert (window.lower, window.upper) == ("0999-01-01 00:00:00", "0999-12-31 23:59:59")
    assert window.contains("0999-06-01 12:00:00") and not window.contains("2025-03-01 10:00:00")
    assert parse_window("0999-01-01", "2030-12-31").contains("2025-03-01 10:00:00")


@given(st.text(max_size=20))
def test_arbitrary_text_is_accepted_only_in_the_two_formats(text: str) -> None:
    try:
        window = parse_window(text, None)
    except InvalidDate:
        return
    datetime.strptime(window.lower or "", "%Y-%m-%d %H:%M:%S")
    assert len(text) in (10, 16) and text.isascii()
