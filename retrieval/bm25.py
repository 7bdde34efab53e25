"""The keyword list: BM25 over the contextual keyword documents with SQLite FTS5.

The query. User text never reaches FTS5 syntax: the query becomes lowercased word tokens (letters and
digits), each with any possessive or contraction suffix dropped (``Caroline's`` -> ``caroline``,
``didn't`` -> ``didn``) and ordinals turned into numbers (``8th`` -> ``8``, so it matches the date
column's ``8 May 2023``); English function words are left out (all words are kept if nothing else is
left); every distinct term becomes a double-quoted FTS5 string and the strings are joined with OR — an
AND query finds nothing for most natural-language questions. The table's tokenizer (Porter stemming by
default) then treats a quoted term exactly as it treats document text.

The work. An OR query scores every match, so when the terms' document counts add up to more than
``max_postings`` the most common terms are dropped until they do not (the rarest always stays): this
bounds the work per query while dropping only the terms BM25 weighs least. On a very large project even
the rarest term may be in more chunks than that; an open search then scores only the ``max_postings``
most recently indexed chunks holding it (highest labels first; the vector list still ranks every
chunk). Which term is rarest is decided without reading whole posting lists: each term's chunks are
counted newest first up to ``max_postings`` + 1, and among terms past that bound the rarest is the one
whose ``max_postings`` + 1 most recent chunks reach furthest back — for an open search, the rarest over
the very stretch that is scored; for a filtered one (which scores its whole window) a cheap stand-in
for the rarest term over the whole table.

The ranking is ``bm25(semantic_fts, body, previous, next, date)`` with the configured column weights
(default 1.0, 0.5, 0.2, 2.0). FTS5's ``bm25()`` is negative with lower better; scores here are negated
so higher is better. With a date or session filter the match runs in its own materialised CTE and the
filter joins afterwards — filter first, rank second — so a narrow window never loses its matches to a
global top-k (joining ``MATCH`` with the filters directly can invert the plan).
"""

from __future__ import annotations

import re
import time

import apsw
from obsmem.indexer.keywords import COLUMNS, FTS_TABLE
from obsmem.indexer.vectors import Filter
from obsmem.retrieval.ranked import RankedList

from obsmem.settings.semantic import Bm25Settings

# Words that carry no topic in a question: function words, question words and auxiliaries of English,
# and the pieces contractions leave behind. Kept short on purpose: BM25's idf already down-weights common
# words; the list only removes terms that match nearly every document.
ENGLISH_STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing done down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me more most my myself no nor not now of off on once only or other our ours ourselves out over
    own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves
    s t ll ve re d m
    """.split()  # noqa: SIM905 (a word list reads better as text)
)

_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")
_SUFFIX = re.compile(r"['\u2019]")
_ORDINAL = re.compile(r"(\d+)(?:st|nd|rd|th)")

POSTINGS_CACHE_SECONDS = 300.0


def query_words(text: str) -> list[str]:
    """Lowercased word tokens without possessive or contraction suffixes, ordinals as numbers."""
    found = []
    for token in _WORD.findall(text.lower()):
        stem = _SUFFIX.split(token, maxsplit=1)[0]
        ordinal = _ORDINAL.fullmatch(stem)
        found.append(ordinal.group(1) if ordinal else stem)
    return found


def query_terms(text: str, stopwords: frozenset[str] = ENGLISH_STOPWORDS) -> list[str]:
    """Distinct terms in order of first use, stopwords removed (all words if nothing else is left)."""
    words = query_words(text)
    kept = [word for word in words if word not in stopwords]
    return list(dict.fromkeys(kept or words))


def fts_string(text: str) -> str:
    """One FTS5 string: double-quoted, inner double quotes doubled."""
    return '"' + text.replace('"', '""') + '"'


def rank_function(weights: dict[str, float]) -> str:
    """``bm25(1.0, 0.5, 0.2, 2.0)``: FTS5's per-query rank setting, one weight per column in order."""
    return "bm25(" + ", ".join(repr(float(weights[column])) for column in COLUMNS) + ")"


class Bm25List:
    def __init__(self, settings: Bm25Settings) -> None:
        self.settings = settings
        parts = settings.tokenizer.split()
        self._tokenizer_name, self._tokenizer_args = parts[0], parts[1:]
        self._trigram = parts[0] == "trigram"
        self._stopwords = ENGLISH_STOPWORDS if settings.stopwords == "english" else frozenset()
        self._rank = rank_function(settings.column_weights)
        self._postings: dict[tuple[str, str], tuple[float, int, int]] = {}

    def terms(self, conn: apsw.Connection, query: str) -> list[tuple[str, list[str]]]:
        """``(term, the tokens FTS5 indexes it as)`` for each query term (tokens empty for trigram)."""
        words = query_terms(query, self._stopwords)
        if self._trigram:
            return [(word, []) for word in words if len(word) >= 3]
        tokenize = conn.fts5_tokenizer(self._tokenizer_name, self._tokenizer_args)
        found = []
        for word in words:
            tokens = [token for _, _, token, *_ in tokenize(word.encode("utf-8"), apsw.FTS5_TOKENIZE_QUERY, None)]
            if tokens:
                found.append((word, tokens))
        return found

    def postings(self, conn: apsw.Connection, term: str) -> tuple[int, int]:
        """``(chunks holding term, counted up to max_postings + 1; the oldest label counted)``.

        Counting newest first and stopping at the bound reads at most that many postings, where an exact
        count reads the term's whole list (tens of milliseconds for a common word at 1M chunks). Cached
        for a while: the figures decide which terms are kept and whether scoring is bounded, and a few
        minutes' drift in them moves those choices only at the margin."""
        key = (conn.filename, term)
        now = time.monotonic()
        cached = self._postings.get(key)
        if cached is not None and now - cached[0] < POSTINGS_CACHE_SECONDS:
            return cached[1], cached[2]
        count, oldest = conn.execute(
            f"SELECT count(*), min(id) FROM (SELECT rowid AS id FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH ?"
            " ORDER BY rowid DESC LIMIT ?)",
            (fts_string(term), self.settings.max_postings + 1),
        ).fetchone()
        if len(self._postings) > 100_000:
            self._postings.clear()
        self._postings[key] = (now, int(count), int(oldest or 0))
        return int(count), int(oldest or 0)

    def _bounded(self, conn: apsw.Connection, terms: list[tuple[str, list[str]]]) -> tuple[list[str], bool]:
        """The terms kept (in query order) and whether their chunks exceed ``max_postings``."""
        if self._trigram or not terms:
            return [term for term, _ in terms], False
        bound = self.settings.max_postings
        counted = []
        for position, (term, _) in enumerate(terms):
            count, oldest = self.postings(conn, term)
            # Past the bound, the term whose most recent postings reach further back is the rarer one.
            counted.append((count, oldest if count > bound else 0, position, term))
        kept: list[tuple[int, str]] = []
        total = 0
        for docs, _, position, term in sorted(counted):
            if kept and total + docs > bound:
                break
            kept.append((position, term))
            total += docs
        return [term for _, term in sorted(kept)], total > bound

    def match(self, conn: apsw.Connection, query: str) -> tuple[str | None, bool]:
        """The FTS5 query for ``query`` (None if it has no terms) and whether scoring must be bounded."""
        terms, over = self._bounded(conn, self.terms(conn, query))
        if not terms:
            return None, False
        return " OR ".join(fts_string(term) for term in terms), over

    def match_expression(self, conn: apsw.Connection, query: str) -> str | None:
        return self.match(conn, query)[0]

    def search(
        self,
        conn: apsw.Connection,
        query: str,
        k: int,
        where: Filter | None = None,
        label_range: tuple[int, int] | None = None,
    ) -> RankedList:
        """Top-k chunks. With a filter, ``label_range`` may bound the chunk labels that can pass it (known
        from the in-memory vectors): FTS5 then reads only that stretch of each posting list, which for a
        date window over memories written in date order is a small part of it. The filter itself is
        still applied exactly.

        An open search whose rarest term is in more than ``max_postings`` chunks scores the most recent
        ``max_postings`` of them (see the module's text); a filtered one scores every match inside its
        window."""
        expression, over = self.match(conn, query)
        result = RankedList("bm25")
        if expression is None or k <= 0:
            return result
        if (where is None or where.is_open) and over:
            sql = (
                f"SELECT id, score FROM (SELECT rowid AS id, rank AS score FROM {FTS_TABLE}"
                f" WHERE {FTS_TABLE} MATCH ? AND rank MATCH ? ORDER BY rowid DESC LIMIT ?)"
                " ORDER BY score, id LIMIT ?"
            )
            params: list[object] = [expression, self._rank, self.settings.max_postings, k + 1]
        elif where is None or where.is_open:
            sql = (
                f"SELECT rowid, rank FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH ? AND rank MATCH ?"
                " ORDER BY rank, rowid LIMIT ?"
            )
            params = [expression, self._rank, k + 1]
        else:
            clauses, params = [], [expression, self._rank]
            if where.lower is not None:
                clauses.append("c.date >= ?")
                params.append(where.lower)
            if where.upper is not None:
                clauses.append("c.date <= ?")
                params.append(where.upper)
            if where.session_id is not None:
                clauses.append("c.session_id = ?")
                params.append(where.session_id)
            bounded = ""
            if label_range is not None:
                bounded = " AND rowid BETWEEN ? AND ?"
                params[2:2] = [label_range[0], label_range[1]]
            sql = (
                f"WITH hits AS MATERIALIZED (SELECT rowid AS id, rank FROM {FTS_TABLE}"
                f" WHERE {FTS_TABLE} MATCH ? AND rank MATCH ?{bounded})"
                " SELECT h.id, h.rank FROM hits AS h JOIN semantic_chunks AS c ON c.id = h.id"
                f" WHERE {' AND '.join(clauses)} ORDER BY h.rank, h.id LIMIT ?"
            )
            params.append(k + 1)
        rows = conn.execute(sql, params).fetchall()
        # A bounded search left matches unscored: its budget was reached whatever the count.
        result.full = len(rows) > k or ((where is None or where.is_open) and over)
        result.items = [(int(label), -float(rank)) for label, rank in rows[:k]]
        return result
