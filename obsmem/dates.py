"""Date bounds for memory filters and the timestamps memories carry.

Memories are dated to the minute (``YYYY-MM-DD HH:MM``) in the conversation's own clock; obsmem stores
them with seconds (``YYYY-MM-DD HH:MM:SS``) so reflections dated by their creation time sort beside them.
Bounds are inclusive: a date-only bound covers the whole day and an ``HH:MM`` bound the whole minute.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from obsmem.errors import InvalidDate

_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)
_MINUTE = re.compile(r"(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2})", re.ASCII)


def _calendar(match: re.Match[str], field: str) -> datetime:
    parts = [int(p) for p in match.groups()]
    try:
        return datetime(*parts)  # type: ignore[arg-type]
    except ValueError:
        raise InvalidDate(f"{field} is not a real calendar date and time", field=field) from None


def parse_timestamp(value: object, field: str = "timestamp") -> str:
    """A memory timestamp: exactly ``YYYY-MM-DD HH:MM``, a real calendar minute. Returns it unchanged."""
    if not isinstance(value, str) or not _MINUTE.fullmatch(value):
        raise InvalidDate(f"{field} must be 'YYYY-MM-DD HH:MM'", field=field)
    _calendar(_MINUTE.fullmatch(value), field)  # type: ignore[arg-type]
    return value


def stored_minute(timestamp: str) -> str:
    """``YYYY-MM-DD HH:MM`` -> the stored ``YYYY-MM-DD HH:MM:00``."""
    return f"{timestamp}:00"


def display_minute(stored: str) -> str:
    return stored[:16]


def stored_text(moment: datetime) -> str:
    """``moment`` in the stored format. Not ``strftime``: C libraries differ on padding a year below 1000
    (glibc writes ``999``), and stored dates compare as text, so every year must have four digits."""
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d} "
        f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}"
    )


def now_stored() -> str:
    return stored_text(datetime.now(UTC))


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class DateWindow:
    """Inclusive stored-format bounds; ``None`` means unbounded on that side."""

    lower: str | None = None
    upper: str | None = None

    @property
    def is_open(self) -> bool:
        return self.lower is None and self.upper is None

    def contains(self, stored: str) -> bool:
        return (self.lower is None or stored >= self.lower) and (self.upper is None or stored <= self.upper)


def _bound(value: object, field: str) -> tuple[datetime, bool]:
    """Parse a bound; the flag says whether it named a whole day."""
    if not isinstance(value, str):
        raise InvalidDate(f"{field} must be a string 'YYYY-MM-DD' or 'YYYY-MM-DD HH:MM'", field=field)
    if match := _DATE.fullmatch(value):
        return _calendar(match, field), True
    if match := _MINUTE.fullmatch(value):
        return _calendar(match, field), False
    raise InvalidDate(f"{field} must be 'YYYY-MM-DD' or 'YYYY-MM-DD HH:MM'", field=field)


def parse_window(after: object = None, before: object = None) -> DateWindow:
    """Validate ``after`` / ``before`` and turn them into inclusive stored-format bounds."""
    lower = upper = None
    if after is not None:
        lower_dt, _ = _bound(after, "after")
        lower = stored_text(lower_dt)
    if before is not None:
        before_dt, whole_day = _bound(before, "before")
        span = timedelta(days=1) if whole_day else timedelta(minutes=1)
        try:
            upper = stored_text(before_dt + span - timedelta(seconds=1))
        except OverflowError:  # the last minute of year 9999
            upper = "9999-12-31 23:59:59"
    if lower is not None and upper is not None and lower > upper:
        raise InvalidDate("after must not be later than before", field="after")
    return DateWindow(lower, upper)
