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
bounds the work per query while dropping only the terms BM25 weighs least.

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
from obsmem.indexer.keywords import COLUMNS, FTS_TABLE, FTS_VOCAB
from obsmem.indexer.vectors import Filter
from obsmem.retrieval.ranked import RankedList

from obsmem.settings_semantic import Bm25Settings

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

DOCUMENT_COUNT_SECONDS = 300.0


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
        self._document_counts: dict[tuple[str, str], tuple[float, int]] = {}

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

    def document_count(self, conn: apsw.Connection, token: str) -> int:
        """Rows holding ``token``, cached for a while: fts5vocab reads the token's whole posting list,
        and the count only sizes the work budget, so a slightly old count is harmless."""
        key = (conn.filename, token)
        now = time.monotonic()
        cached = self._document_counts.get(key)
        if cached is not None and now - cached[0] < DOCUMENT_COUNT_SECONDS:
            return cached[1]
        row = conn.execute(f"SELECT doc FROM {FTS_VOCAB} WHERE term = ?", (token,)).fetchone()
        count = 0 if row is None else int(row[0])
        if len(self._document_counts) > 100_000:
            self._document_counts.clear()
        self._document_counts[key] = (now, count)
        return count

    def _bounded(self, conn: apsw.Connection, terms: list[tuple[str, list[str]]]) -> list[str]:
        if self._trigram or len(terms) <= 1:
            return [term for term, _ in terms]
        counted = [
            (sum(self.document_count(conn, token) for token in tokens), position, term)
            for position, (term, tokens) in enumerate(terms)
        ]
        kept: list[tuple[int, str]] = []
        total = 0
        for docs, position, term in sorted(counted):
            if kept and total + docs > self.settings.max_postings:
                break
            kept.append((position, term))
            total += docs
        return [term for _, term in sorted(kept)]

    def match_expression(self, conn: apsw.Connection, query: str) -> str | None:
        terms = self._bounded(conn, self.terms(conn, query))
        if not terms:
            return None
        return " OR ".join(fts_string(term) for term in terms)

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
        still applied exactly."""
        expression = self.match_expression(conn, query)
        result = RankedList("bm25")
        if expression is None or k <= 0:
            return result
        if where is None or where.is_open:
            sql = (
                f"SELECT rowid, rank FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH ? AND rank MATCH ?"
                " ORDER BY rank, rowid LIMIT ?"
            )
            params: list[object] = [expression, self._rank, k + 1]
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
        result.full = len(rows) > k
        result.items = [(int(label), -float(rank)) for label, rank in rows[:k]]
        return result
