"""Exact search on PostgreSQL: the contract of :mod:`obsmem.retrieval.exact`, on pg_trgm indexes.

Either corpus of :mod:`obsmem.retrieval.corpus`: memories, or conversation events (their content and
their tool arguments, each on its own, with a trigram index each: ``p0003_conversation``). The corpus's
watermark and partial date indexes are SQLite's; PostgreSQL keeps its indexes whole in the append.

The answer is the one a plain ``LIKE '%q%' ESCAPE '\\'`` scan ordered newest first gives on SQLite:

- **ASCII case-insensitive**: ``ILIKE`` on text declared ``COLLATE "C"`` (``p0001_core``), under which
  PostgreSQL folds ASCII letters only, as SQLite's ``LIKE`` does (``É`` never matches ``é``); each row's
  check is the same test, ``strpos(lower(text), needle with ASCII letters folded) > 0`` (``lower()``
  folds ASCII only under ``"C"`` too), which no trigram index answers and which costs less per row;
- **literal**: ``strpos`` takes the needle itself, no pattern, so ``%``, ``_`` and ``\\`` in a needle are
  themselves (the trigram probes that only narrow are runs of letters and digits);
- **newest first, bounded**: ``ORDER BY date DESC, id DESC LIMIT fetch``, the caller asking for one row
  more than it returns to say ``truncated``.

The plan is chosen as SQLite's searcher chooses it, from a sample of the newest rows (:class:`NeedleSample`,
kept per project and corpus): how often the needle occurs there (rows a walk must read to find ``fetch``
matches) against how often its rarest trigram occurs (candidates an index yields):

- **walk** — a needle common enough that ``fetch`` matches are expected within :data:`WALK_ROWS` rows:
  the newest ``WALK_ROWS`` rows of the window by the date index, ``ILIKE`` checked on each. When it finds
  ``fetch`` matches they are the newest of the whole window (every newer row was read); otherwise its
  rows are discarded and one of the plans below answers.
- **candidates** — fewer candidates than walk steps expected: the rows an index holds for the needle (a
  ``MATERIALIZED`` CTE, so the planner cannot turn it into a walk of the date index), ``ILIKE`` checked
  on each, then sorted. With a run of three letters or digits (pg_trgm indexes the trigrams of such
  words only) the index is pg_trgm's GIN index, asked for the needle's :data:`PROBE_TRIGRAMS` rarest
  trigrams; otherwise it is the index of one- and two-character substrings (``p0007_short_needles``):
  ``qz``, ``#9``, ``()``.
- **word-joins** — a phrase of common words (every trigram common, the phrase not): the rows the index of
  joins between adjacent words (``p0011_word_joins``) holds for the needle's rarest joins, checked and
  sorted as candidates are. ``login session`` looks up the join ``gin ses``, which spans the space no
  trigram of pg_trgm spans.
- **date-walk** — anything else (a needle rarer than the walk found, with only common trigrams and no rare
  join): down the date index (or the session's) until ``fetch`` rows match.

Every index only narrows: ``ILIKE`` is checked on every row, so a misestimate costs time, never a
different answer. Each plan's statement leaves PostgreSQL's planner no choice that matters: its own choice
between the trigram index and the date index misjudged both ways (the whole trigram index read for a
phrase of common words, the whole table scanned for a rare needle under the default ``random_page_cost``).
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import cached_property, lru_cache
from typing import Any, Literal

from obsmem.dates import DateWindow, stored_text
from obsmem.retrieval.corpus import MEMORIES, Corpus
from obsmem.retrieval.exact import date_session_filters
from obsmem.retrieval.results import Hit
from obsmem.storage import WORD_JOIN_MAX_GAP

# Rows the walk reads before another plan is asked (about what SQLite's walk budget reads).
WALK_ROWS = 2000
# pg_trgm indexes the trigrams of words (runs of letters and digits); a needle without a run of three
# gives it nothing to look up, and is looked up in the index of short substrings instead.
_TRIGRAM_WORD = re.compile(r"[A-Za-z0-9]{3}")
_ASCII_LETTER = re.compile(r"[a-z]")
_ASCII_FOLD = str.maketrans({chr(c): chr(c + 32) for c in range(ord("A"), ord("Z") + 1)})
# Trigrams a candidate probe looks up: the needle's rarest few (SQLite's probe takes as many).
PROBE_TRIGRAMS = 3
# Candidates are always worth it below this many (a walk that finds too few reads far more).
CANDIDATE_MIN_ROWS = 2000
# Joins a word-joins probe looks up: the rarest two (each one alone already narrows to the phrase's rows
# and their like, so a third reads more postings than it saves checks).
PROBE_JOINS = 2
# A word-joins probe expected to yield more candidates than this first looks among the newest rows only:
# the rows a few times as many as should hold ``fetch`` matches (JOIN_WINDOW_MARGIN), whose date index
# ANDed with the joins' leaves a few dozen rows to read (the phrase's 2,033 rows at 1M memories, each a
# heap page, cost more than the window's 30,000 date entries).
JOIN_WINDOW_MIN_CANDIDATES = 400
JOIN_WINDOW_MARGIN = 3
# Runs of ASCII letters and digits (words, as obsmem_word_joins reads them) and the runs between them.
_RUNS = re.compile(r"(?P<word>[0-9a-z]+)|[^0-9a-z]+")
Plan = Literal["walk", "candidates", "word-joins", "date-walk"]


def needle_trigrams(needle: str) -> list[str]:
    """The needle's trigrams pg_trgm indexes as they are: each run of three ASCII letters or digits, folded
    (``ILIKE '%abc%'`` looks up exactly the trigram ``abc``)."""
    folded = needle.translate(_ASCII_FOLD)
    return sorted({folded[i : i + 3] for i in range(len(folded) - 2) if _TRIGRAM_WORD.fullmatch(folded[i : i + 3])})


def needle_word_joins(needle: str) -> list[str]:
    """The joins of ``obsmem_word_joins`` every row holding ``needle`` holds: for each gap between two of the
    needle's words (a run of other characters, at most ``WORD_JOIN_MAX_GAP`` long, inside the needle so that it is
    the whole gap in the row too), the first word's last three characters, the gap and the second word's
    first three. A word at an end of the needle may be the end of a longer word in the row (or its start):
    only its three characters next to the gap are known, so a shorter one gives no join; a word between two
    gaps is whole, and its own characters are the join's."""
    runs = list(_RUNS.finditer(needle.translate(_ASCII_FOLD)))
    joins = set()
    for at in range(1, len(runs) - 1):
        gap, before, after = runs[at].group(), runs[at - 1].group(), runs[at + 1].group()
        if runs[at].lastgroup == "word" or len(gap) > WORD_JOIN_MAX_GAP:
            continue  # a word, or a gap too long to be indexed
        if (at == 1 and len(before) < 3) or (at + 1 == len(runs) - 1 and len(after) < 3):
            continue  # an end word too short to know the row's characters beside the gap
        joins.add(before[-3:] + gap + after[:3])
    return sorted(joins)


def short_grams(needle: str) -> list[str]:
    """The substrings of ``p0007_short_needles``'s index every row holding ``needle`` holds: its character
    (one-character needle) or its pairs of adjacent characters, ASCII letters folded."""
    folded = needle.translate(_ASCII_FOLD)
    if len(folded) == 1:
        return [folded]
    return sorted({folded[i : i + 2] for i in range(len(folded) - 1)})


def _alone(conn: Any) -> Any:
    """How the searcher runs a statement: each of its statements answers on its own (a walk's rows are kept
    only when they are the answer; the sample only estimates), so outside a begun transaction each goes by
    itself, one exchange with the server (``PostgresConnection.execute_alone``), naming the project's
    schema (:func:`qualified`) so that it needs no transaction's ``search_path``."""
    execute_alone = getattr(conn, "execute_alone", None)
    if execute_alone is None:
        return conn.execute
    schema = getattr(conn, "schema", "")
    if not schema:
        return execute_alone

    def alone(sql: str, params: Sequence[object] = (), *, prepare: bool = False) -> Any:
        return execute_alone(qualified(sql, schema), params, prepare=prepare, qualified=True)

    return alone


# The objects of a project's schema the searcher's statements name: its corpora's tables (after FROM) and
# the functions of p0001_core, p0007_short_needles and p0011_word_joins.
_SCHEMA_TABLES = re.compile(r"\bFROM (memories|events)\b")
_SCHEMA_FUNCTIONS = re.compile(r"\b(obsmem_short_grams|obsmem_word_joins|obsmem_event_id)\(")


@lru_cache(maxsize=256)
def qualified(sql: str, schema: str) -> str:
    """The searcher's statement with the project's tables and functions named in ``schema``. The needle and
    every other value are parameters, never part of ``sql``, so nothing a user typed is rewritten."""
    sql = _SCHEMA_TABLES.sub(lambda match: f"FROM {schema}.{match.group(1)}", sql)
    return _SCHEMA_FUNCTIONS.sub(lambda match: f"{schema}.{match.group(1)}(", sql)


class PostgresExactSearcher:
    """Exact searches over one corpus of one project, on one PostgreSQL connection in a read snapshot."""

    def __init__(
        self,
        conn: Any,
        *,
        corpus: Corpus = MEMORIES,
        walk_rows: int = WALK_ROWS,
        plan: Plan | None = None,
        join_window_rows: int | None = None,
    ) -> None:
        self.conn = conn
        self.corpus = corpus
        self.walk_rows = walk_rows  # 0: no walk
        self.plan = plan  # None: chosen from the estimate; a plan's name forces it (tests compare them all)
        # Rows the word-joins plan's first probe covers; None: estimated (tests set a few to exercise it).
        self.join_window_rows = join_window_rows
        # Which plan answered the last search: "walk", "candidates", "short-candidates", "word-joins" or
        # "date-walk".
        self.last_plan = ""

    def search(
        self, needle: str, window: DateWindow, limit: int, session_id: str | None = None
    ) -> tuple[list[Hit], bool]:
        """Up to ``limit`` hits, newest first, and whether more matched."""
        rows = self.rows(needle, window, limit + 1, session_id)
        return [Hit.from_row(row) for row in rows[:limit]], len(rows) > limit

    def rows(self, needle: str, window: DateWindow, fetch: int, session_id: str | None = None) -> list[tuple]:
        """Up to ``fetch`` matching rows (the corpus's hit columns), newest first."""
        where, params = date_session_filters(self.corpus, window, session_id)
        folded = needle.translate(_ASCII_FOLD)  # what each row's test looks for (see _recheck)
        plan = self.plan or self._estimated_plan(needle, fetch)
        if plan == "walk":
            walked = self._walk(folded, where, params, fetch) if self.walk_rows > 0 else []
            if len(walked) >= fetch:
                self.last_plan = "walk"
                return walked
            plan = self._estimated_plan(needle, fetch, walked=True) if self.plan is None else "date-walk"
        if plan == "candidates":
            return self._candidates(needle, folded, where, params, fetch)
        if plan == "word-joins" and (joins := needle_word_joins(needle)):
            return self._word_joins(joins, folded, where, params, fetch)
        return self._date_walk(folded, where, params, fetch)

    def _estimated_plan(self, needle: str, fetch: int, *, walked: bool = False) -> Plan:
        """SQLite's cost rule: rows a walk must read to find ``fetch`` matches against candidates the index
        yields (its rarest trigram's rows, or the needle's own for a short needle), a row read each.

        Counting a needle in the whole sample took 0.06-0.18 ms at 1M memories, a third of a common word's
        search: the count stops once it has seen enough for the walk (a common needle's are near the start),
        a needle with a rare trigram is counted in that trigram's few rows, and a one- or two-character
        needle is looked up in counts made once per sample."""
        sample = NeedleSample.for_connection(self.conn, self.corpus)
        # The walk is expected to find ``fetch`` matches within its rows when the sample holds this many.
        enough = fetch * sample.size / self.walk_rows if self.walk_rows > 0 and not walked else None
        trigrams = needle_trigrams(needle)
        rarest = sample.rarest(trigrams, 1)[0] if trigrams else None
        if len(needle) <= 2:
            seen = sample.short_occurrences(needle)
        elif rarest is not None and (within := sample.occurrences_in_rows_of(rarest, needle)) is not None:
            seen = within  # a rare trigram's few rows hold every occurrence
        else:
            seen = sample.occurrences(needle, None if enough is None else max(math.ceil(enough), 1))
        occurring = max(seen, 0.5)  # an unseen needle: just under one occurrence in the sample
        if enough is not None and occurring >= enough:
            return "walk"
        frequency = occurring / sample.size
        walk_rows = fetch / frequency
        if rarest is not None:
            frequency = sample.frequency_of_trigram(rarest)
        affordable = max(walk_rows, CANDIDATE_MIN_ROWS)
        if sample.total_rows * frequency <= affordable:
            return "candidates"
        # Every trigram common: a join between two of its words may still be rare (a phrase of common words).
        # A join's occurrences as a substring of the sample bound its rows (a short whole word's join also
        # ends longer words there): enough for the estimate.
        joins = needle_word_joins(needle)
        if joins and sample.total_rows * sample.frequency_of_join(sample.rarest_joins(joins, 1)[0]) <= affordable:
            return "word-joins"
        return "date-walk"

    def _recheck(self, folded: str) -> str:
        """The needle's test on each match column, hidden from the trigram index, for statements that read
        another index or none (the planner prices the trigram index's reading of a needle's every posting
        list, or of the whole index for a needle without trigrams, far too low). Its value is the needle
        with its ASCII letters folded: ``lower()`` of text declared ``COLLATE "C"`` folds ASCII letters
        only, as ILIKE there does, so ``strpos(lower(text), folded) > 0`` is the same test as ILIKE of the
        escaped pattern, and ``strpos`` searches with a skip table where LIKE compares at every position:
        ``login session``'s date walk of 8,231 rows at 1M memories took 3.5 ms with it, 4.9 ms with
        ``lower(text) LIKE`` and 5.0-9 ms with the ``(text || '') ILIKE`` it replaced."""
        # A needle without ASCII letters needs no folded copy of each text (0.37 ms against 0.53 ms for the
        # 669 rows ``42`` walks at 1M memories).
        text = "lower({})" if _ASCII_LETTER.search(folded) else "{}"
        return " OR ".join(f"strpos({text.format(column)}, ?) > 0" for column in self.corpus.match_columns)

    def _walk(self, folded: str, where: str, params: list[object], fetch: int) -> list[tuple]:
        order = f"ORDER BY {self.corpus.date} DESC, m.id DESC"
        return _alone(self.conn)(
            f"SELECT {self.corpus.columns} FROM (SELECT * FROM {self.corpus.table} AS m WHERE TRUE{where}"
            f" {order} LIMIT ?) AS m WHERE ({self._recheck(folded)}) {order} LIMIT ?",
            (*params, self.walk_rows, *self.corpus.patterns(folded), fetch),
        ).fetchall()

    def _date_walk(self, folded: str, where: str, params: list[object], fetch: int) -> list[tuple]:
        """Down the date index (or the session's) until ``fetch`` rows match: a phrase of common words, whose
        every trigram is common. Left to itself the planner read the trigram index: 466 ms at 1M memories
        for ``login session`` against 13 ms down the date index."""
        self.last_plan = "date-walk"
        sql = (
            f"SELECT {self.corpus.columns} FROM {self.corpus.table} AS m WHERE ({self._recheck(folded)}){where}"
            f" ORDER BY {self.corpus.date} DESC, m.id DESC LIMIT ?"
        )
        return _alone(self.conn)(sql, (*self.corpus.patterns(folded), *params, fetch)).fetchall()

    def _word_joins(self, joins: list[str], folded: str, where: str, params: list[object], fetch: int) -> list[tuple]:
        """The rows holding the needle's rarest joins between words (``p0011_word_joins``), checked and sorted
        as :meth:`_candidates` does."""
        self.last_plan = "word-joins"
        sample = NeedleSample.for_connection(self.conn, self.corpus)
        rarest = sample.rarest_joins(joins, PROBE_JOINS)
        tests = [
            f"(obsmem_word_joins({column}) @> ?::text[] AND strpos(lower({column}), ?) > 0)"
            for column in self.corpus.match_columns
        ]
        values: list[object] = [value for _ in self.corpus.match_columns for value in (rarest, folded)]
        boundary = self._join_window(sample, rarest[0], folded, fetch)
        if boundary is not None:
            # Every row left out is older than the boundary, so ``fetch`` matches inside are the newest.
            found = self._checked(tests, values, f" AND {self.corpus.date} >= ?{where}", [boundary, *params], fetch)
            if len(found) >= fetch:
                return found
        return self._checked(tests, values, where, params, fetch)

    def _join_window(self, sample: NeedleSample, rarest: str, folded: str, fetch: int) -> str | None:
        """The date the newest rows worth probing first reach back to, or None to probe them all."""
        if self.join_window_rows is not None:
            rows = self.join_window_rows
        else:
            if sample.total_rows * sample.frequency_of_join(rarest) <= JOIN_WINDOW_MIN_CANDIDATES:
                return None
            rows = math.ceil(JOIN_WINDOW_MARGIN * fetch / sample.frequency_of_join(folded))
            if rows * 2 >= sample.total_rows:
                return None  # most of the table: its date index would cost more than the candidates
        return sample.window_boundary(rows, self.corpus)

    def _candidates(self, needle: str, folded: str, where: str, params: list[object], fetch: int) -> list[tuple]:
        """The rows an index holds for the needle, checked and sorted: the rows holding its rarest trigrams
        (SQLite's probe), or its short substrings."""
        trigrams = needle_trigrams(needle)
        if trigrams:
            self.last_plan = "candidates"
            # Each probe is ILIKE on one trigram of the needle, which pg_trgm looks up as that trigram alone;
            # GIN ANDs them in one index scan. The needle's every trigram made it read the posting lists of
            # common ones whole (36 ms for MapToolArguments at 1M memories, 1.2 ms for its rarest three).
            rarest = NeedleSample.for_connection(self.conn, self.corpus).rarest(trigrams, PROBE_TRIGRAMS)
            tests = []
            values: list[object] = []
            for column in self.corpus.match_columns:
                probes = " AND ".join(f"{column} ILIKE ?" for _ in rarest)
                tests.append(f"({probes} AND strpos(lower({column}), ?) > 0)")
                values += [f"%{trigram}%" for trigram in rarest] + [folded]
        else:
            self.last_plan = "short-candidates"
            # Each column on its own: its index holds its own substrings (PostgreSQL ORs the two bitmaps).
            tests = [
                f"(obsmem_short_grams({column}) @> ?::text[] AND strpos(lower({column}), ?) > 0)"
                for column in self.corpus.match_columns
            ]
            grams = short_grams(needle)
            values = [value for _ in self.corpus.match_columns for value in (grams, folded)]
        return self._checked(tests, values, where, params, fetch, prepare=bool(trigrams))

    def _checked(
        self,
        tests: list[str],
        values: list[object],
        where: str,
        params: list[object],
        fetch: int,
        *,
        prepare: bool = False,
    ) -> list[tuple]:
        """The rows passing any of ``tests`` (an index's probe and the needle's check each), newest first."""
        # MATERIALIZED: the planner cannot turn the candidates into a walk of the date index. The rows are
        # taken whole, so the sort needs no second read of each.
        sql = (
            f"WITH m AS MATERIALIZED (SELECT * FROM {self.corpus.table} AS m WHERE ({' OR '.join(tests)}){where})"
            f" SELECT {self.corpus.columns} FROM m ORDER BY {self.corpus.date} DESC, m.id DESC LIMIT ?"
        )
        values = [*values, *params, fetch]
        if prepare and hasattr(self.conn, "execute_alone"):
            # Planning the trigram probes with their patterns written in (pg_trgm estimating each one) cost
            # 0.4-0.6 ms a search at 1M memories; prepared, the plan is the server's to keep. Written as
            # scalar subqueries instead (the planner prices them without the column's statistics), they still
            # cost 0.07-0.2 ms of planning, and the server 0.1-0.3 ms more CPU time per search for
            # MapToolArguments than the prepared plan.
            return _alone(self.conn)(sql, values, prepare=True).fetchall()
        return _alone(self.conn)(sql, values).fetchall()


SAMPLE_ROWS = 2000
SAMPLE_MAX_AGE_S = 300.0
# A sample younger than this is used without asking how much the table grew (one statement saved).
SAMPLE_TRUSTED_S = 10.0
# The start of each sampled text only: an event's content can be a tool's whole output, and the sample
# (and its trigram counts, built in Python) must stay small; frequencies are estimates either way.
SAMPLE_TEXT_CHARS = 500
# The sample rows of each trigram kept (their indexes), so that a needle whose rarest trigram is in no more
# rows is counted in those rows alone.
TRIGRAM_ROWS_KEPT = 32
# Samples kept (each at most SAMPLE_ROWS texts of SAMPLE_TEXT_CHARS): the most recently searched projects'
# and corpora's.
SAMPLE_CACHE_ENTRIES = 32
# Joins between words whose frequency a sample keeps at most (then it forgets them all and counts anew).
JOINS_COUNTED = 4096
# Sample rows out of date order (by id) past which the sample's span of dates is not extrapolated.
WINDOW_OUT_OF_ORDER = 0.05
# The sample's dates are extrapolated at most this many times its own length back (further, the estimate is
# too rough to bound anything worth a probe of its own).
WINDOW_MAX_STRETCH = 200


class NeedleSample:
    """The newest ``SAMPLE_ROWS`` texts of one corpus of one project, ASCII-folded, for plan choice only
    (SQLite's searcher keeps the same sample). Rebuilt when the table grew by a tenth, or after
    ``SAMPLE_MAX_AGE_S``."""

    _cache: OrderedDict[tuple[bytes, bytes, bytes, str, str], NeedleSample] = OrderedDict()
    _lock = threading.Lock()

    def __init__(self, texts: list[str], total_rows: int, dates: list[str] | None = None) -> None:
        self.total_rows = max(total_rows, 1)
        self.dates = dates or []  # the texts' dates, newest row (highest id) first, for window boundaries
        self.size = max(len(texts), 1)
        self.built_at = time.monotonic()
        self.checked_at = self.built_at
        # One string, texts joined by a line break (which no needle holds): counting a needle in it is one
        # C-level scan.
        self.folded = "\n".join(text.translate(_ASCII_FOLD) for text in texts)
        self._texts = self.folded.split("\n")
        self._trigram_rows: Counter[str] | None = None  # built on the first trigram asked for
        self._rows_of_trigram: dict[str, list[int]] = {}
        self._short_counts: Counter[str] | None = None  # built on the first short needle asked for
        self._join_frequencies: dict[str, float] = {}

    @classmethod
    def for_connection(cls, conn: Any, corpus: Corpus) -> NeedleSample:
        # The server and database from libpq directly (``info.dsn`` parses the connection string each time),
        # without opening the transaction.
        pgconn = conn.pgconn
        key = (pgconn.host, pgconn.port, pgconn.db, getattr(conn, "schema", ""), corpus.table)
        with cls._lock:
            cached = cls._cache.get(key)
            if cached is not None:
                cls._cache.move_to_end(key)
        now = time.monotonic()
        if cached is not None and now - cached.checked_at < SAMPLE_TRUSTED_S:
            return cached
        (total,) = _alone(conn)(f"SELECT coalesce(max(id), 0) FROM {corpus.table}").fetchone()
        if (
            cached is not None
            and now - cached.built_at < SAMPLE_MAX_AGE_S
            and abs(total - cached.total_rows) <= cached.total_rows // 10
        ):
            cached.checked_at = now
            return cached
        texts = ", ".join(column.removeprefix("m.") for column in corpus.match_columns)
        rows = _alone(conn)(
            f"SELECT left(concat_ws(chr(10), {texts}), ?), {corpus.date.removeprefix('m.')} FROM {corpus.table}"
            " ORDER BY id DESC LIMIT ?",
            (SAMPLE_TEXT_CHARS, SAMPLE_ROWS),
        ).fetchall()
        sample = cls([row[0] for row in rows], total, [row[1] for row in rows])
        with cls._lock:
            cls._cache[key] = sample
            cls._cache.move_to_end(key)
            while len(cls._cache) > SAMPLE_CACHE_ENTRIES:
                cls._cache.popitem(last=False)
        return sample

    def frequency_of_trigram(self, trigram: str) -> float:
        """Rows of the sample holding the trigram, per row (at least the floor of an unseen needle)."""
        return max(self._trigram_counts().get(trigram, 0), 0.5) / self.size

    def _trigram_counts(self) -> Counter[str]:
        """Rows holding each trigram, and the first :data:`TRIGRAM_ROWS_KEPT` of those rows, made once."""
        if self._trigram_rows is None:
            counts: Counter[str] = Counter()
            kept: dict[str, list[int]] = {}
            for row, text in enumerate(self._texts):
                trigrams = {text[i : i + 3] for i in range(len(text) - 2)}
                counts.update(trigrams)
                for trigram in trigrams:
                    rows = kept.setdefault(trigram, [])
                    if len(rows) < TRIGRAM_ROWS_KEPT:
                        rows.append(row)
            self._rows_of_trigram = kept
            self._trigram_rows = counts
        return self._trigram_rows

    def occurrences_in_rows_of(self, trigram: str, needle: str) -> int | None:
        """``occurrences(needle)`` counted in the rows holding ``trigram`` alone, when it is one of the
        needle's and rare enough that its rows were kept (None otherwise): every occurrence of the needle is
        in such a row, and a rare identifier's count reads a few rows instead of the whole sample (0.12 ms
        at 1M memories)."""
        if self._trigram_counts().get(trigram, 0) > TRIGRAM_ROWS_KEPT:
            return None
        folded = needle.translate(_ASCII_FOLD)
        return sum(self._texts[row].count(folded) for row in self._rows_of_trigram.get(trigram, ()))

    def rarest(self, trigrams: list[str], count: int) -> list[str]:
        return sorted(trigrams, key=self.frequency_of_trigram)[:count]

    def window_boundary(self, rows: int, corpus: Corpus) -> str | None:
        """A date about ``rows`` rows back from the newest (None: no estimate worth trying). Within the sample
        it is the date of its ``rows``-th newest row; further back it is extrapolated from the sample's rate
        of rows per unit of time, only when the sample's rows were written in date order (else its dates say
        nothing of the table's) and not past :data:`WINDOW_MAX_STRETCH` times the sample. Any date is a
        correct boundary (a search on ``date >= boundary`` that finds enough rows found the newest); a wrong
        estimate costs time only."""
        newest_first = self._newest_first
        if not newest_first:
            return None
        if rows <= len(newest_first):
            return newest_first[rows - 1]
        rate = self._seconds_per_row
        if rate is None or rows > len(newest_first) * WINDOW_MAX_STRETCH:
            return None
        try:
            boundary = datetime.fromisoformat(newest_first[0]) - timedelta(seconds=rate * rows)
        except (ValueError, OverflowError):  # a date Python cannot read, or a boundary before year 1
            return None
        return corpus.lower_bound(stored_text(boundary))

    @cached_property
    def _newest_first(self) -> list[str]:
        return sorted(self.dates, reverse=True)

    @cached_property
    def _seconds_per_row(self) -> float | None:
        """Seconds between rows, over the middle nine tenths of the sample's dates (so that one row dated
        decades off, as an imported or misdated one may be, does not stretch it); None when the sample's
        rows are out of date order, its dates unreadable or all one instant."""
        dates, newest_first = self.dates, self._newest_first
        out_of_order = sum(later < earlier for later, earlier in zip(dates, dates[1:], strict=False))
        trim = len(newest_first) // 20
        inner = newest_first[trim : len(newest_first) - trim]
        if out_of_order > len(dates) * WINDOW_OUT_OF_ORDER or len(inner) < 2:
            return None
        try:
            span = (datetime.fromisoformat(inner[0]) - datetime.fromisoformat(inner[-1])).total_seconds()
        except (ValueError, TypeError):  # unreadable, or naive and aware stamps mixed
            return None
        return span / (len(inner) - 1) if span > 0 else None

    def frequency_of_join(self, join: str) -> float:
        """A join's (or a phrase's) occurrences as a substring per row, counted once per sample (a count scans
        the sample: about 0.1 ms at 1M memories, and the estimate, the window and the probe all ask)."""
        frequency = self._join_frequencies.get(join)
        if frequency is None:
            if len(self._join_frequencies) >= JOINS_COUNTED:
                self._join_frequencies.clear()
            frequency = self._join_frequencies[join] = self.frequency_of_needle(join)
        return frequency

    def rarest_joins(self, joins: list[str], count: int) -> list[str]:
        return sorted(joins, key=self.frequency_of_join)[:count]

    def frequency_of_needle(self, needle: str) -> float:
        """Occurrences per row (not rows: close enough for a cost estimate); never zero, an unseen needle
        counting as just under one occurrence in the sample."""
        return max(self.occurrences(needle), 0.5) / self.size

    def occurrences(self, needle: str, at_most: int | None = None) -> int:
        """Occurrences of the needle in the sample, counted as ``str.count`` counts (without overlaps), or
        ``at_most`` once that many are seen: the count of a common needle stops near the start."""
        folded = needle.translate(_ASCII_FOLD)
        if at_most is None:
            return self.folded.count(folded)
        found = 0
        at = self.folded.find(folded)
        while at >= 0 and found < at_most:
            found += 1
            at = self.folded.find(folded, at + len(folded))
        return found

    def short_occurrences(self, needle: str) -> int:
        """Occurrences of a one- or two-character needle in the sample, from counts of every such substring
        made once per sample (a scan of the sample for each short needle cost up to 0.18 ms). Overlapping
        occurrences count (``aa`` twice in ``aaa``, where ``occurrences`` counts one): an estimate either way."""
        if self._short_counts is None:
            counts: Counter[str] = Counter(self.folded)
            counts.update(self.folded[i : i + 2] for i in range(len(self.folded) - 1))
            self._short_counts = counts
        return self._short_counts.get(needle.translate(_ASCII_FOLD), 0)
