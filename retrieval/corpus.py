"""What exact search searches: memories or conversation events, each described once.

Exact search (:mod:`obsmem.retrieval.exact`) runs the same plans over either table; a :class:`Corpus`
names what differs: the table and its trigram index, the date column and its two walk indexes, the text
a needle must occur in, and the hit columns. Both corpora answer the same contract: a literal substring,
ASCII case-insensitive, newest first.

Events are searched in their content and their tool arguments (the canonical JSON text they are stored
as), each on its own: a needle never matches across the two. Event times are stored as ISO 8601
(``YYYY-MM-DDTHH:MM:SS.mmmZ``); the hit columns present them in the memories' stored format
(``YYYY-MM-DD HH:MM:SS``), so hits of both kinds sort and display alike.

The events' trigram index and their date indexes are filled after the append, up to a durable watermark
(``m0006_conversation``): every plan that reads an index also checks every event above the watermark
directly, so the answer is the same however far the indexes have got.
"""

from __future__ import annotations

from dataclasses import dataclass

from obsmem.retrieval.results import EVENT_COLUMNS, HIT_COLUMNS

# Above every character an ISO 8601 stamp holds: an upper bound ``...:59`` plus this covers the whole
# second, whatever fraction or zone suffix follows it.
_AFTER_STAMP = "~"


@dataclass(frozen=True)
class Corpus:
    """One searchable table, as the exact plans need it (``m`` is the table's alias in every statement)."""

    table: str
    trigrams: str  # the FTS5 trigram table (rowid = the table's id)
    trigram_terms: str  # its fts5vocab table
    date: str  # the column the date filters and the newest-first order use
    by_date: str  # index on (date, id)
    by_session_date: str  # index on (session_id, date, id)
    match_columns: tuple[str, ...]  # a row matches when any of these holds the needle
    columns: str  # the hit columns (obsmem.retrieval.results.Hit.from_row)
    sample_text: str  # SQL for the text the plan's statistics sample
    iso_dates: bool  # dates stored as ISO 8601 text (events) rather than the stored format (memories)
    # SQL for the last id the trigram index holds when it trails the table (None: triggers keep it whole).
    indexed_through: str | None = None
    # The condition the date indexes are partial on: they hold the rows up to that same watermark.
    in_date_order: str = ""

    @property
    def match(self) -> str:
        """The LIKE condition, one ``?`` per match column (see :meth:`patterns`)."""
        tests = [f"{column} LIKE ? ESCAPE '\\'" for column in self.match_columns]
        return tests[0] if len(tests) == 1 else "(" + " OR ".join(tests) + ")"

    def patterns(self, pattern: str) -> tuple[str, ...]:
        return (pattern,) * len(self.match_columns)

    def lower_bound(self, stored: str) -> str:
        """A stored-format lower bound (``YYYY-MM-DD HH:MM:SS``) in this corpus's date format."""
        return stored.replace(" ", "T", 1) if self.iso_dates else stored

    def upper_bound(self, stored: str) -> str:
        """A stored-format upper bound in this corpus's date format, covering its whole last second."""
        return stored.replace(" ", "T", 1) + _AFTER_STAMP if self.iso_dates else stored


MEMORIES = Corpus(
    table="memories",
    trigrams="memory_trigrams",
    trigram_terms="memory_trigram_terms",
    date="m.date",
    by_date="memories_by_date",
    by_session_date="memories_by_session_date",
    match_columns=("m.content",),
    columns=HIT_COLUMNS,
    sample_text="content",
    iso_dates=False,
)

EVENTS = Corpus(
    table="events",
    trigrams="event_trigrams",
    trigram_terms="event_trigram_terms",
    date="m.created_at",
    by_date="events_by_date",
    by_session_date="events_by_session_date",
    match_columns=("m.content", "m.tool_args"),
    columns=EVENT_COLUMNS,
    # Content and arguments joined by a line break, which no needle holds: counts never span the two.
    sample_text="content || char(10) || coalesce(tool_args, '')",
    iso_dates=True,
    indexed_through="SELECT indexed_through FROM event_trigram_progress",
    in_date_order=" AND m.in_date_order = 1",
)
