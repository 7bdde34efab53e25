"""Exact search: one contiguous literal substring, ASCII case-insensitive, newest first.

The answer is always the one a plain ``content LIKE '%q%' ESCAPE '\\'`` scan ordered newest first would
give; only the plan differs, chosen by what is cheapest for the needle:

- **candidate plan** — ask the FTS5 trigram index for the memories holding the needle's rarest
  trigrams (a superset of the matches: the index also folds case beyond ASCII), check LIKE on exactly
  those and sort them newest first. Cheap when some trigram of the needle is rare: identifiers.
- **walk plan** — walk memories newest first along the date index, checking LIKE, and stop at
  ``limit + 1`` matches. Cheap when the needle itself is common, because the walk ends early.
- **window plan** — for a needle whose rarest trigrams are too common to probe across the whole table
  but whose walk would read thousands of rows (a phrase of common words, ``login session``): take the
  newest stretch of dates that should hold ``limit + 1`` matches, read only the id range of that stretch
  from the index (the rarest trigrams ANDed, as in the candidate plan) and check those candidates. Memories
  are written roughly in date order, so the stretch's ids are a narrow range; when they are not (an
  imported history), the range's size says so and the plan is not chosen. Too few matches in the stretch:
  a stretch four times longer is tried, then the walk.
- **short needles** (one or two characters) have no trigram of their own, but every occurrence starts
  one (the index appends two U+0001 sentinels to each text), so a rare short needle is looked up as the
  OR of the vocabulary terms that begin with it.

The choice is a cost estimate from a sample of recent memories (:class:`TrigramSample`): how often the
needle occurs (rows a walk must read) against how often its rarest trigrams occur (postings the index
must read). Estimates can be wrong, so each plan is bounded and hands over: a probe that finds more
than ``index_plan_max_docs`` candidates gives way to a walk; a walk that exceeds its step budget gives
way to the full trigram phrase query, or for short needles to one sequential scan. A misestimate costs
time, never correctness.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import apsw

from obsmem.dates import DateWindow
from obsmem.errors import InvalidQuery
from obsmem.retrieval.corpus import MEMORIES, Corpus
from obsmem.retrieval.results import Hit
from obsmem.validation import CONTROL_CHARACTERS

MAX_QUERY_CHARS = 1000
# A needle whose trigrams co-occur in more memories than this is walked, not looked up.
INDEX_PLAN_MAX_DOCS = 1000
# Trigrams used by the probe: the rarest few (any subset of a needle's trigrams is a necessary condition).
PROBE_TRIGRAMS = 3
# Relative cost of reading one index posting versus checking one row in a walk.
POSTING_COST = 0.2
# A walk expected to read more rows than this tries the window plan first (when the probe was not cheap).
WINDOW_PLAN_WALK_ROWS = 2000
# The window holds this many times the rows the estimate says hold ``limit + 1`` matches (estimates are
# drawn from a sample of 2,000 memories: a margin against a needle rarer than it looked)...
WINDOW_MARGIN = 3
# ...at least this many rows, at most the larger, over this many tries, each four times longer.
WINDOW_MIN_ROWS = 1000
WINDOW_MAX_ROWS = 200_000
WINDOW_TRIES = 2
# Trigrams the window plan's probe ANDs: its trigrams are all common, so more of them narrow the
# candidates to check (each a row read) for little more index reading.
WINDOW_PROBE_TRIGRAMS = 6
# Candidates the window plan checks at most: each costs about what a walk step costs, and the plan is
# only tried when the walk is expected to read more than WINDOW_PLAN_WALK_ROWS rows.
WINDOW_MAX_DOCS = 2000
# A short needle expected to need a walk longer than this is looked up in the vocabulary instead...
SHORT_NEEDLE_WALK_ROWS = 5000
# ...unless more index terms than this begin with it (then it is common after all).
SHORT_NEEDLE_MAX_TERMS = 200
_SENTINELS = "\x01\x01"
# Virtual-machine steps a walk may take (about five per row checked: ~20,000 rows).
WALK_BUDGET_STEPS = 100_000
_PROGRESS_INTERVAL = 1000


def validate_query(query: object) -> str:
    """The literal needle: surrounding whitespace trimmed, 1 to 1000 characters, no NUL."""
    if not isinstance(query, str):
        raise InvalidQuery("query must be a string", field="query")
    needle = query.strip()
    if not needle:
        raise InvalidQuery("query must not be empty", field="query")
    if len(needle) > MAX_QUERY_CHARS:
        raise InvalidQuery(f"query is longer than {MAX_QUERY_CHARS} characters", field="query")
    if CONTROL_CHARACTERS.search(needle):
        raise InvalidQuery("query must not contain control characters (NUL, line breaks, ...)", field="query")
    try:
        needle.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidQuery("query is not valid UTF-8 text", field="query") from None
    return needle


def like_pattern(needle: str) -> str:
    """``%needle%`` with ``\\``, ``%`` and ``_`` escaped, for ``LIKE ? ESCAPE '\\'``."""
    escaped = needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def fts_phrase(needle: str) -> str:
    """The needle as one FTS5 phrase: quoted, inner quotes doubled, so no FTS5 syntax is ever parsed."""
    return '"' + needle.replace('"', '""') + '"'


@dataclass(frozen=True)
class ExactPlan:
    """What the searcher did, for benchmarks and debugging."""

    name: str  # "candidates", "short-candidates", "window", "walk", "walk+phrase" or "walk+scan"
    candidates: int | None  # probe result size, when a probe ran and stopped early


class _WalkBudgetExhausted(Exception):
    pass


def date_session_filters(corpus: Corpus, window: DateWindow, session_id: str | None) -> tuple[str, list[object]]:
    """The date window and session as `` AND ...`` clauses with their parameters (both backends' SQL)."""
    clauses: list[str] = []
    params: list[object] = []
    if window.lower is not None:
        clauses.append(f"{corpus.date} >= ?")
        params.append(corpus.lower_bound(window.lower))
    if window.upper is not None:
        clauses.append(f"{corpus.date} <= ?")
        params.append(corpus.upper_bound(window.upper))
    if session_id is not None:
        clauses.append("m.session_id = ?")
        params.append(session_id)
    return "".join(f" AND {clause}" for clause in clauses), params


class ExactSearcher:
    """Runs exact searches over one corpus (memories or events) on one connection (one per thread)."""

    def __init__(
        self,
        conn: apsw.Connection,
        *,
        corpus: Corpus = MEMORIES,
        index_plan_max_docs: int = INDEX_PLAN_MAX_DOCS,
        walk_budget_steps: int = WALK_BUDGET_STEPS,
        posting_cost: float = POSTING_COST,
        short_needle_walk_rows: float = SHORT_NEEDLE_WALK_ROWS,
        window_plan_walk_rows: float = WINDOW_PLAN_WALK_ROWS,
        window_max_docs: int = WINDOW_MAX_DOCS,
        window_first_rows: int | None = None,
    ) -> None:
        self.conn = conn
        self.corpus = corpus
        self.index_plan_max_docs = index_plan_max_docs
        self.walk_budget_steps = walk_budget_steps
        self.posting_cost = posting_cost
        self.short_needle_walk_rows = short_needle_walk_rows
        self.window_plan_walk_rows = window_plan_walk_rows
        self.window_max_docs = window_max_docs
        # The first window's rows; None: from the estimate (tests set a few rows to exercise the retries).
        self.window_first_rows = window_first_rows
        self._tokenize = conn.fts5_tokenizer("trigram", [])
        self.last_plan: ExactPlan | None = None
        # The index's watermark for the search running now (None: the index holds every row): the plans
        # that read the index also check every row above it.
        self._unindexed_above: int | None = None

    def trigrams(self, needle: str) -> list[str]:
        """The needle's distinct trigrams as the index folds them, in order of first appearance."""
        tokens = self._tokenize(needle.encode("utf-8"), apsw.FTS5_TOKENIZE_QUERY, None)
        return list(dict.fromkeys(token[2] for token in tokens))

    def search(
        self, needle: str, window: DateWindow, limit: int, session_id: str | None = None
    ) -> tuple[list[Hit], bool]:
        """Up to ``limit`` hits, newest first, and whether more matched."""
        rows = self.rows(needle, window, limit + 1, session_id)
        return [Hit.from_row(row) for row in rows[:limit]], len(rows) > limit

    def rows(self, needle: str, window: DateWindow, fetch: int, session_id: str | None = None) -> list[tuple]:
        """Up to ``fetch`` matching rows (the corpus's hit columns), newest first."""
        where, params = date_session_filters(self.corpus, window, session_id)
        if self.corpus.indexed_through is not None:
            self._unindexed_above = self.conn.execute(self.corpus.indexed_through).fetchone()[0]
        pattern = like_pattern(needle)
        trigrams = self.trigrams(needle)
        if trigrams:
            sample = TrigramSample.for_connection(self.conn, self._tokenize, self.corpus)
            rarest = sample.rarest(trigrams, PROBE_TRIGRAMS)
            walk_rows = fetch / sample.frequency_of_needle(needle)
            probe_postings = sample.total_rows * sample.frequency_of_trigram(rarest[0])
            if probe_postings * self.posting_cost < walk_rows:
                candidates = self._probe(rarest, "AND")
                if candidates is not None:
                    self.last_plan = ExactPlan("candidates", len(candidates))
                    return self._check_candidates(candidates, pattern, where, params, fetch)
            if walk_rows > self.window_plan_walk_rows:
                window_trigrams = sample.rarest(trigrams, WINDOW_PROBE_TRIGRAMS)
                found = self._window(window_trigrams, sample, walk_rows, pattern, where, params, fetch)
                if found is not None:
                    return found
        else:
            sample = TrigramSample.for_connection(self.conn, self._tokenize, self.corpus)
            if fetch / sample.frequency_of_needle(needle) > self.short_needle_walk_rows:
                terms = self._terms_beginning_with(needle)
                candidates = None if terms is None else self._probe(terms, "OR")
                if candidates is not None:
                    self.last_plan = ExactPlan("short-candidates", len(candidates))
                    return self._check_candidates(candidates, pattern, where, params, fetch)
        try:
            rows = self._walk(pattern, where, params, fetch)
            self.last_plan = ExactPlan("walk", None)
            return rows
        except _WalkBudgetExhausted:
            pass
        if trigrams:
            self.last_plan = ExactPlan("walk+phrase", None)
            return self._phrase(needle, pattern, where, params, fetch)
        self.last_plan = ExactPlan("walk+scan", None)
        return self._scan(pattern, where, params, fetch)

    def _terms_beginning_with(self, needle: str) -> list[str] | None:
        """Index terms that begin with a one- or two-character needle (None: too many to be rare)."""
        tokens = self._tokenize((needle + _SENTINELS).encode("utf-8"), apsw.FTS5_TOKENIZE_QUERY, None)
        folded = tokens[0][2][: len(needle)]  # the needle folded exactly as the index folds it
        terms = [
            row[0]
            for row in self.conn.execute(
                f"SELECT term FROM {self.corpus.trigram_terms} WHERE term >= ? AND term < ? LIMIT ?",
                (folded, folded + "\U0010ffff", SHORT_NEEDLE_MAX_TERMS + 1),
            )
        ]
        return terms if len(terms) <= SHORT_NEEDLE_MAX_TERMS else None

    def _probe(
        self, terms: list[str], operator: str, within: tuple[int, int] | None = None, cap: int | None = None
    ) -> list[int] | None:
        """Rowids matching the terms joined by AND or OR (inside ``within``, first and last rowid, when
        given), or None when there are more than ``cap`` (by default ``index_plan_max_docs``)."""
        if not terms:
            return []
        cap = self.index_plan_max_docs if cap is None else cap
        query = f" {operator} ".join(fts_phrase(term) for term in terms)
        bounded, bounds = ("", ()) if within is None else (" AND rowid BETWEEN ? AND ?", within)
        rowids = [
            row[0]
            for row in self.conn.execute(
                f"SELECT rowid FROM {self.corpus.trigrams} WHERE {self.corpus.trigrams} MATCH ?{bounded} LIMIT ?",
                (query, *bounds, cap + 1),
            )
        ]
        return rowids if len(rowids) <= cap else None

    def _window(
        self,
        rarest: list[str],
        sample: TrigramSample,
        walk_rows: float,
        pattern: str,
        where: str,
        params: list[object],
        fetch: int,
    ) -> list[tuple] | None:
        """The window plan (see the module's text), or None when it does not pay or did not find enough.

        Exact: the window is every memory (inside the filters) dated on or after its boundary date, the
        probe reads the whole id range of those memories, and any memory outside the window is older
        than every memory in it. So ``fetch`` matches inside it are the newest ``fetch`` overall, and a
        window that reaches the oldest memory holds every match."""
        rows = self.window_first_rows or max(WINDOW_MIN_ROWS, int(walk_rows * WINDOW_MARGIN))
        for _ in range(WINDOW_TRIES):
            if rows > WINDOW_MAX_ROWS:
                return None
            boundary = self._window_boundary(where, params, rows)
            span_where, span_params = where, params
            if boundary is not None:
                span_where, span_params = f" AND {self.corpus.date} >= ?{where}", [boundary[0], *params]
            lowest, highest = self._window_ids(where, params, boundary)
            if lowest is None:  # no indexed row inside the filters: the unindexed ones are all there is
                self.last_plan = ExactPlan("window", 0)
                return self._check_candidates([], pattern, where, params, fetch)
            span = highest - lowest + 1
            if span * sample.frequency_of_trigram(rarest[0]) * self.posting_cost >= walk_rows:
                return None  # ids out of date order: the range holds too many postings to read
            candidates = self._probe(rarest, "AND", (lowest, highest), self.window_max_docs)
            if candidates is None:
                return None
            found = self._check_candidates(candidates, pattern, span_where, span_params, fetch)
            if len(found) >= fetch or boundary is None:
                self.last_plan = ExactPlan("window", len(candidates))
                return found
            rows *= 4
        return None

    def _window_boundary(self, where: str, params: list[object], rows: int) -> tuple[str, int] | None:
        """Date and id of the ``rows``-th newest row inside the filters (None: there are fewer)."""
        corpus = self.corpus
        return self.conn.execute(
            f"SELECT {corpus.date}, m.id FROM {corpus.table} AS m INDEXED BY {self._walk_index(where)}"
            f" WHERE 1{corpus.in_date_order}{where} ORDER BY {corpus.date} DESC, m.id DESC LIMIT 1 OFFSET ?",
            (*params, rows - 1),
        ).fetchone()

    def _window_ids(
        self, where: str, params: list[object], boundary: tuple[str, int] | None
    ) -> tuple[int, int] | tuple[None, None]:
        """The first and last id of the memories inside the filters dated on or after the boundary.

        Memories are usually written in date order, and then the boundary memory has the lowest id of
        its window. Proving that (no memory of the window has a lower id) reads less than finding the
        lowest id; with no later bound on the window, the last id is simply the table's. Otherwise (a
        ``before`` bound, a session, an old memory written late) both ends are looked up."""
        corpus = self.corpus
        open_ended = f"{corpus.date} <=" not in where and "m.session_id" not in where
        if boundary is not None and open_ended:
            date, row = boundary
            older = self.conn.execute(
                f"SELECT EXISTS (SELECT 1 FROM {corpus.table} AS m INDEXED BY {corpus.by_date}"
                f" WHERE {corpus.date} >= ?{corpus.in_date_order}{where} AND m.id < ?)",
                (date, *params, row),
            ).fetchone()[0]
            if not older:
                return row, self.conn.execute(f"SELECT max(id) FROM {corpus.table}").fetchone()[0]
        span_where, span_params = where, params
        if boundary is not None:
            span_where, span_params = f" AND {corpus.date} >= ?{where}", [boundary[0], *params]
        return self.conn.execute(
            f"SELECT min(m.id), max(m.id) FROM {corpus.table} AS m INDEXED BY {self._walk_index(where)}"
            f" WHERE 1{corpus.in_date_order}{span_where}",
            span_params,
        ).fetchone()

    def _check_candidates(
        self, candidates: list[int], pattern: str, where: str, params: list[object], fetch: int
    ) -> list[tuple]:
        tail, tail_params = self._tail()
        if not candidates and not tail:
            return []
        corpus = self.corpus
        sql = (
            f"SELECT m.id FROM {corpus.table} AS m"
            f" WHERE m.id IN (SELECT value FROM json_each(?){tail})"
            f" AND {corpus.match}{where}"
            f" ORDER BY {corpus.date} DESC, m.id DESC LIMIT ?"
        )
        return self._hit_rows(
            self.conn.execute(sql, (json.dumps(candidates), *tail_params, *corpus.patterns(pattern), *params, fetch))
        )

    def _hit_rows(self, chosen: Iterable[tuple[Any, ...]]) -> list[tuple]:
        """The hit columns of the rows a plan chose (``(id,)`` each, at most ``fetch``), newest first.

        Plans sort and limit on row ids alone, and only the rows returned get their hit columns: an event's
        id among them is a SHA-256 derived on read, which computed for every row entering a sort cost a
        search over an unindexed tail a hash per matching event."""
        ids = [row[0] for row in chosen]
        if not ids:
            return []
        corpus = self.corpus
        return self.conn.execute(
            f"SELECT {corpus.columns} FROM {corpus.table} AS m WHERE m.id IN (SELECT value FROM json_each(?))"
            f" ORDER BY {corpus.date} DESC, m.id DESC",
            (json.dumps(ids),),
        ).fetchall()

    def _tail(self) -> tuple[str, tuple[int, ...]]:
        """The rows the index does not hold yet, as a ``UNION ALL`` arm of a candidate id list."""
        if self._unindexed_above is None:
            return "", ()
        return f" UNION ALL SELECT id FROM {self.corpus.table} WHERE id > ?", (self._unindexed_above,)

    def _walk(self, pattern: str, where: str, params: list[object], fetch: int) -> list[tuple]:
        corpus = self.corpus
        order = f"{corpus.date}, m.id"
        tail: list[tuple] = []
        if self._unindexed_above is not None:
            # The date indexes hold the rows up to the watermark: the newest `fetch` of all rows are the
            # newest of the walk's own newest `fetch` and the unindexed rows'. The unindexed rows are read
            # first and outside the walk's budget (their cost is bounded by the tail, as in the other plans).
            tail = self.conn.execute(
                f"SELECT {order} FROM {corpus.table} AS m WHERE m.id > ? AND {corpus.match}{where}"
                f" ORDER BY {corpus.date} DESC, m.id DESC LIMIT ?",
                (self._unindexed_above, *corpus.patterns(pattern), *params, fetch),
            ).fetchall()
        sql = (
            f"SELECT {order} FROM {corpus.table} AS m INDEXED BY {self._walk_index(where)}"
            f" WHERE {corpus.match}{corpus.in_date_order}{where}"
            f" ORDER BY {corpus.date} DESC, m.id DESC LIMIT ?"
        )
        steps = 0
        budget = self.walk_budget_steps

        def over_budget() -> bool:
            nonlocal steps
            steps += _PROGRESS_INTERVAL
            return steps > budget

        self.conn.set_progress_handler(over_budget, _PROGRESS_INTERVAL)
        try:
            rows = self.conn.execute(sql, (*corpus.patterns(pattern), *params, fetch)).fetchall()
        except apsw.InterruptError:
            raise _WalkBudgetExhausted from None
        finally:
            self.conn.set_progress_handler(None)
        merged = sorted(rows + tail, reverse=True) if tail else rows
        return self._hit_rows(row[1:] for row in merged[:fetch])

    def _walk_index(self, where: str) -> str:
        return self.corpus.by_session_date if "m.session_id" in where else self.corpus.by_date

    def _phrase(self, needle: str, pattern: str, where: str, params: list[object], fetch: int) -> list[tuple]:
        # MATERIALIZED keeps the planner from turning this inside out (walking dates, probing FTS).
        corpus = self.corpus
        tail, tail_params = self._tail()
        sql = (
            "WITH candidates AS MATERIALIZED ("
            f"  SELECT rowid AS id FROM {corpus.trigrams} WHERE {corpus.trigrams} MATCH ?{tail})"
            f" SELECT m.id FROM candidates AS c JOIN {corpus.table} AS m ON m.id = c.id"
            f" WHERE {corpus.match}{where}"
            f" ORDER BY {corpus.date} DESC, m.id DESC LIMIT ?"
        )
        return self._hit_rows(
            self.conn.execute(sql, (fts_phrase(needle), *tail_params, *corpus.patterns(pattern), *params, fetch))
        )

    def _scan(self, pattern: str, where: str, params: list[object], fetch: int) -> list[tuple]:
        # One sequential pass over the table is cheaper than walking the whole date index.
        corpus = self.corpus
        sql = (
            f"SELECT m.id FROM {corpus.table} AS m NOT INDEXED"
            f" WHERE {corpus.match}{where}"
            f" ORDER BY {corpus.date} DESC, m.id DESC LIMIT ?"
        )
        return self._hit_rows(self.conn.execute(sql, (*corpus.patterns(pattern), *params, fetch)))


_ASCII_FOLD = str.maketrans({chr(c): chr(c + 32) for c in range(ord("A"), ord("Z") + 1)})
SAMPLE_ROWS = 2000
# The start of each sampled text only, as PostgreSQL's sample (exact_postgres.SAMPLE_TEXT_CHARS): an event
# can hold a tool's whole output, and counting trigrams in Python costs about a quarter of a microsecond a
# character, so 84 events of 1 MB took 20 s to sample (the whole search, on the server's event loop). A
# sample is an estimate either way; this bounds one to 1M characters, a quarter of a second at most.
SAMPLE_TEXT_CHARS = 500
SAMPLE_MAX_AGE_S = 300.0
# Databases whose sample is kept (each holds SAMPLE_ROWS texts and their trigram counts, about 1 MB): a
# server answering many projects keeps the most recently searched ones, not every one it ever saw.
SAMPLE_CACHE_DATABASES = 32


class TrigramSample:
    """Statistics of the newest rows of one corpus (memories or events) of one database, for plan choice only.

    Built from the first ``SAMPLE_TEXT_CHARS`` characters of the newest ``SAMPLE_ROWS`` rows and rebuilt when
    the table grew by a tenth or after ``SAMPLE_MAX_AGE_S``. FTS5's own vocabulary table would give exact
    counts, but it reads a term's whole posting list to count it, which is as slow as the search it is meant
    to plan.
    """

    _cache: OrderedDict[tuple[str, str], TrigramSample] = OrderedDict()
    _lock = threading.Lock()

    def __init__(self, contents: list[str], total_rows: int, tokenize: Any) -> None:
        self.total_rows = max(total_rows, 1)
        self.size = max(len(contents), 1)
        self.built_at = time.monotonic()
        # One string, lines joined by a character no memory or query holds: counting a needle in it is
        # a single C-level scan instead of a Python loop over the sample.
        self.folded = "\n".join(text.translate(_ASCII_FOLD) for text in contents)
        counts: Counter[str] = Counter()
        for text in contents:
            tokens = tokenize(text.encode("utf-8"), apsw.FTS5_TOKENIZE_DOCUMENT, None)
            counts.update({token[2] for token in tokens})
        self.trigram_docs = counts

    @classmethod
    def for_connection(cls, conn: apsw.Connection, tokenize: Any, corpus: Corpus = MEMORIES) -> TrigramSample:
        total = conn.execute(f"SELECT coalesce(max(id), 0) FROM {corpus.table}").fetchone()[0]
        key = (conn.filename, corpus.table)
        with cls._lock:
            cached = cls._cache.get(key)
            if cached is not None:
                cls._cache.move_to_end(key)
        fresh = (
            cached is not None
            and time.monotonic() - cached.built_at < SAMPLE_MAX_AGE_S
            and abs(total - cached.total_rows) <= cached.total_rows // 10
        )
        if fresh:
            return cached  # type: ignore[return-value]
        contents = [
            row[0]
            for row in conn.execute(
                f"SELECT substr({corpus.sample_text}, 1, ?) FROM {corpus.table} ORDER BY id DESC LIMIT ?",
                (SAMPLE_TEXT_CHARS, SAMPLE_ROWS),
            )
        ]
        sample = cls(contents, total, tokenize)
        with cls._lock:
            cls._cache[key] = sample
            cls._cache.move_to_end(key)
            while len(cls._cache) > SAMPLE_CACHE_DATABASES:
                cls._cache.popitem(last=False)
        return sample

    def _floor(self) -> float:
        # Unseen in the sample: assume just under one occurrence, never zero.
        return 0.5 / self.size

    def frequency_of_needle(self, needle: str) -> float:
        # Occurrences, not documents: close enough for a cost estimate.
        seen = self.folded.count(needle.translate(_ASCII_FOLD))
        return max(seen / self.size, self._floor())

    def frequency_of_trigram(self, trigram: str) -> float:
        return max(self.trigram_docs.get(trigram, 0) / self.size, self._floor())

    def rarest(self, trigrams: list[str], count: int) -> list[str]:
        return sorted(trigrams, key=lambda term: self.trigram_docs.get(term, 0))[:count]
