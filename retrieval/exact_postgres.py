"""Exact search on PostgreSQL: the contract of :mod:`obsmem.retrieval.exact`, on pg_trgm indexes.

Either corpus of :mod:`obsmem.retrieval.corpus`: memories, or conversation events (their content and
their tool arguments, each on its own, with a trigram index each: ``p0003_conversation``). The corpus's
watermark and partial date indexes are SQLite's; PostgreSQL keeps its indexes whole in the append.

The answer is the one a plain ``LIKE '%q%' ESCAPE '\\'`` scan ordered newest first gives on SQLite:

- **ASCII case-insensitive**: ``ILIKE`` on text declared ``COLLATE "C"`` (``p0001_core``), under which
  PostgreSQL folds ASCII letters only, as SQLite's ``LIKE`` does (``É`` never matches ``é``);
- **literal**: the same escaped pattern (:func:`~obsmem.retrieval.exact.like_pattern`), so ``%``, ``_`` and
  ``\\`` in a needle are themselves;
- **newest first, bounded**: ``ORDER BY date DESC, id DESC LIMIT fetch``, the caller asking for one row
  more than it returns to say ``truncated``.

The plan is PostgreSQL's own choice between the trigram GIN index (``memory_trigrams``: the rows holding
the needle's trigrams, then a sort) and a walk down ``memories_by_date`` checking each row until enough
match, costed from its statistics of the table and the needle's trigrams; that is the choice the SQLite
searcher makes by hand from a sample. The index only narrows (``ILIKE`` is rechecked on every row it
yields), so a needle without trigrams (one or two characters, or punctuation) is answered by a scan and
is slower, never different.

PostgreSQL's default ``random_page_cost`` (4, a spinning disk) prices the GIN index's page reads so high
that it scans the whole table for a rare needle: at 50,000 memories a sequential scan took 99 ms where
the index answers in 7 ms. The searcher's read sets it to :data:`RANDOM_PAGE_COST` (the usual value for
SSDs and cached tables) for its own statements only; then the planner picks the index for rare needles
and the date walk for common ones.

Before that query, a **bounded walk** reads the newest :data:`WALK_ROWS` rows of the window by the date
index and checks ``ILIKE`` on them (SQLite's walk plan with its step budget). A common needle finds
``fetch`` matches there and is answered at once: those rows are the newest ``fetch`` matches of the whole
window, since every row newer than the last of them was read. Otherwise the walk's rows are discarded
and the query above answers. Left to itself, PostgreSQL's planner priced the full walk of a common needle
above the trigram index's bitmap and sort, and read tens of thousands of postings to sort them.
"""

from __future__ import annotations

from typing import Any

from obsmem.dates import DateWindow
from obsmem.retrieval.corpus import MEMORIES, Corpus
from obsmem.retrieval.exact import date_session_filters, like_pattern
from obsmem.retrieval.results import Hit

RANDOM_PAGE_COST = 1.1
# Rows the bounded walk reads before the trigram index is asked (about what SQLite's walk budget reads).
WALK_ROWS = 2000


class PostgresExactSearcher:
    """Exact searches over one corpus of one project, on one PostgreSQL connection in a read snapshot."""

    def __init__(self, conn: Any, *, corpus: Corpus = MEMORIES, walk_rows: int = WALK_ROWS) -> None:
        self.conn = conn
        self.corpus = corpus
        self.walk_rows = walk_rows  # 0: no bounded walk (the tests compare both)
        self.last_plan = ""  # "walk" or "query": which answered the last search (for benchmarks)
        # SET LOCAL: this read transaction only (it ends with the search's snapshot).
        conn.execute(f"SET LOCAL random_page_cost = {RANDOM_PAGE_COST}")

    def search(
        self, needle: str, window: DateWindow, limit: int, session_id: str | None = None
    ) -> tuple[list[Hit], bool]:
        """Up to ``limit`` hits, newest first, and whether more matched."""
        rows = self.rows(needle, window, limit + 1, session_id)
        return [Hit.from_row(row) for row in rows[:limit]], len(rows) > limit

    def rows(self, needle: str, window: DateWindow, fetch: int, session_id: str | None = None) -> list[tuple]:
        """Up to ``fetch`` matching rows (the corpus's hit columns), newest first."""
        where, params = date_session_filters(self.corpus, window, session_id)
        match = " OR ".join(f"{column} ILIKE ? ESCAPE '\\'" for column in self.corpus.match_columns)
        patterns = self.corpus.patterns(like_pattern(needle))
        order = f"ORDER BY {self.corpus.date} DESC, m.id DESC"
        if self.walk_rows > 0:
            walked = self.conn.execute(
                f"SELECT {self.corpus.columns} FROM (SELECT * FROM {self.corpus.table} AS m WHERE TRUE{where}"
                f" {order} LIMIT ?) AS m WHERE ({match}) {order} LIMIT ?",
                (*params, self.walk_rows, *patterns, fetch),
            ).fetchall()
            if len(walked) >= fetch:
                self.last_plan = "walk"
                return walked
        self.last_plan = "query"
        sql = f"SELECT {self.corpus.columns} FROM {self.corpus.table} AS m WHERE ({match}){where} {order} LIMIT ?"
        return self.conn.execute(sql, (*patterns, *params, fetch)).fetchall()
