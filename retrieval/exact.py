"""Exact search: one contiguous literal substring, ASCII case-insensitive, newest first.

The answer is always the one a plain ``content LIKE '%q%' ESCAPE '\\'`` scan would give; only the plan
differs, chosen by what is cheapest for the needle:

- **index plan** — the FTS5 trigram index yields every memory holding all of the needle's trigrams in
  sequence (a superset: it folds case beyond ASCII), the LIKE check keeps the true matches, then they
  are sorted newest first. Cheap when the needle is rare.
- **walk plan** — walk memories newest first along the date index, checking LIKE, and stop at
  ``limit + 1`` matches. Cheap when the needle is common (or too short for trigrams), because the walk
  ends early.

The trigram document counts in ``memory_trigram_counts`` estimate how common a needle is. A walk that
finds too few matches within its row budget hands over to the index plan, so a misestimate costs time,
never correctness.
"""

from __future__ import annotations

from dataclasses import dataclass

import apsw
from obsmem.retrieval.results import HIT_COLUMNS, Hit

from obsmem.dates import DateWindow
from obsmem.errors import InvalidQuery

MAX_QUERY_CHARS = 1000
# A needle whose rarest trigram is in more documents than this is walked, not looked up.
INDEX_PLAN_MAX_DOCS = 3000
# How many of the newest rows a walk checks before handing over to the index plan.
WALK_ROW_BUDGET = 20_000


def validate_query(query: object) -> str:
    """The literal needle: surrounding whitespace trimmed, 1 to 1000 characters, no NUL."""
    if not isinstance(query, str):
        raise InvalidQuery("query must be a string", field="query")
    needle = query.strip()
    if not needle:
        raise InvalidQuery("query must not be empty", field="query")
    if len(needle) > MAX_QUERY_CHARS:
        raise InvalidQuery(f"query is longer than {MAX_QUERY_CHARS} characters", field="query")
    if "\x00" in needle:
        raise InvalidQuery("query must not contain NUL characters", field="query")
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
    name: str  # "index" or "walk"
    estimated_docs: int | None


def _filters(window: DateWindow, session_id: str | None) -> tuple[str, list[object]]:
    clauses: list[str] = []
    params: list[object] = []
    if window.lower is not None:
        clauses.append("m.date >= ?")
        params.append(window.lower)
    if window.upper is not None:
        clauses.append("m.date <= ?")
        params.append(window.upper)
    if session_id is not None:
        clauses.append("m.session_id = ?")
        params.append(session_id)
    return "".join(f" AND {clause}" for clause in clauses), params


class ExactSearcher:
    """Runs exact searches on one connection (one per thread)."""

    def __init__(self, conn: apsw.Connection) -> None:
        self.conn = conn
        self._tokenize = conn.fts5_tokenizer("trigram", [])

    def trigrams(self, needle: str) -> list[str]:
        tokens = self._tokenize(needle.encode("utf-8"), apsw.FTS5_TOKENIZE_QUERY, None)
        return [token[2] for token in tokens]

    def estimate_docs(self, needle: str) -> int | None:
        """Documents holding the needle's rarest trigram (an upper bound on matches); None if < 3 chars."""
        terms = set(self.trigrams(needle))
        if not terms:
            return None
        rarest: int | None = None
        for term in terms:
            row = self.conn.execute("SELECT doc FROM memory_trigram_counts WHERE term = ?", (term,)).fetchone()
            count = 0 if row is None else row[0]
            rarest = count if rarest is None else min(rarest, count)
            if rarest == 0:
                break
        return rarest

    def choose_plan(self, needle: str) -> ExactPlan:
        estimate = self.estimate_docs(needle)
        if estimate is not None and estimate <= INDEX_PLAN_MAX_DOCS:
            return ExactPlan("index", estimate)
        return ExactPlan("walk", estimate)

    def search(
        self, needle: str, window: DateWindow, limit: int, session_id: str | None = None
    ) -> tuple[list[Hit], bool]:
        """Up to ``limit`` hits, newest first, and whether more matched."""
        plan = self.choose_plan(needle)
        if plan.name == "index":
            rows = self._index_plan(needle, window, limit + 1, session_id)
        else:
            rows = self._walk_plan(needle, window, limit + 1, session_id, plan.estimated_docs is not None)
        hits = [Hit.from_row(row) for row in rows[:limit]]
        return hits, len(rows) > limit

    def _index_plan(self, needle: str, window: DateWindow, fetch: int, session_id: str | None) -> list[tuple]:
        where, params = _filters(window, session_id)
        # MATERIALIZED keeps the planner from turning this inside out (walking dates, probing FTS).
        sql = (
            "WITH candidates AS MATERIALIZED ("
            "  SELECT rowid FROM memory_trigrams WHERE memory_trigrams MATCH ?)"
            f" SELECT {HIT_COLUMNS} FROM candidates AS c JOIN memories AS m ON m.id = c.rowid"
            f" WHERE m.content LIKE ? ESCAPE '\\'{where}"
            " ORDER BY m.date DESC, m.id DESC LIMIT ?"
        )
        return self.conn.execute(sql, (fts_phrase(needle), like_pattern(needle), *params, fetch)).fetchall()

    def _walk_plan(
        self, needle: str, window: DateWindow, fetch: int, session_id: str | None, can_hand_over: bool
    ) -> list[tuple]:
        where, params = _filters(window, session_id)
        pattern = like_pattern(needle)
        if not can_hand_over:
            sql = (
                f"SELECT {HIT_COLUMNS} FROM memories AS m WHERE m.content LIKE ? ESCAPE '\\'{where}"
                " ORDER BY m.date DESC, m.id DESC LIMIT ?"
            )
            return self.conn.execute(sql, (pattern, *params, fetch)).fetchall()
        # Check at most WALK_ROW_BUDGET of the newest rows in the window; if that finds enough, it is
        # the answer (everything older sorts after). Otherwise the needle is rarer than its trigrams
        # suggested: ask the index.
        sql = (
            f"SELECT {HIT_COLUMNS}, m.content LIKE ? ESCAPE '\\' AS matched FROM ("
            f"  SELECT m.* FROM memories AS m WHERE 1{where}"
            "   ORDER BY m.date DESC, m.id DESC LIMIT ?) AS m"
            " WHERE matched ORDER BY m.date DESC, m.id DESC LIMIT ?"
        )
        rows = self.conn.execute(sql, (pattern, *params, WALK_ROW_BUDGET, fetch)).fetchall()
        if len(rows) >= fetch:
            return [row[:6] for row in rows]
        return self._index_plan(needle, window, fetch, session_id)
