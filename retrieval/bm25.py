"""The keyword list: BM25 over chunk text with SQLite FTS5.

User text never reaches FTS5 syntax: the query is split by the table's own tokenizer, each distinct
term becomes a double-quoted string (inner quotes doubled), and the terms are joined with OR — an AND
query finds nothing for most natural-language questions. English function words are left out (unless
nothing else is left), and when the terms' document counts add up to more than ``max_postings``, the
most common terms are dropped until they do not (the rarest always stays): an OR query scores every
match, so this bounds the work per query while dropping only the terms BM25 weighs least.

FTS5's ``bm25()`` is negative with lower better; scores here are negated so higher is better. With a
date or session filter the match runs in its own materialised CTE and the filter joins afterwards —
filter first, rank second — so a narrow window never loses its matches to a global top-k (joining
``MATCH`` with the filters directly can invert the plan).
"""

from __future__ import annotations

import time

import apsw
from obsmem.indexer.stores import FTS_TABLE, FTS_VOCAB
from obsmem.indexer.vectors import Filter
from obsmem.retrieval.ranked import RankedList

from obsmem.settings_semantic import Bm25Settings

ENGLISH_STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me more most my myself no nor not now of off on once only or other our ours ourselves out over
    own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves
    """.split()  # noqa: SIM905 (a word list reads better as text)
)


DOCUMENT_COUNT_SECONDS = 300.0


def fts_string(text: str) -> str:
    """One FTS5 string token: double-quoted, inner double quotes doubled."""
    return '"' + text.replace('"', '""') + '"'


class Bm25List:
    def __init__(self, settings: Bm25Settings) -> None:
        self.settings = settings
        parts = settings.tokenizer.split()
        self._tokenizer_name, self._tokenizer_args = parts[0], parts[1:]
        self._trigram = parts[0] == "trigram"
        self._stopwords = ENGLISH_STOPWORDS if settings.stopwords == "english" else frozenset()
        self._document_counts: dict[tuple[str, str], tuple[float, int]] = {}

    def terms(self, conn: apsw.Connection, query: str) -> list[tuple[str, str]]:
        """Distinct ``(term as FTS5 indexes it, text to quote)`` pairs of the query, stopwords removed."""
        if self._trigram:
            words = [w for w in query.split() if len(w) >= 3]
            return list({w.lower(): (w.lower(), w) for w in words}.values())
        tokenize = conn.fts5_tokenizer(self._tokenizer_name, self._tokenizer_args)
        data = query.encode("utf-8")
        seen: dict[str, str] = {}
        for start, end, token, *_ in tokenize(data, apsw.FTS5_TOKENIZE_QUERY, None):
            if token not in seen:
                seen[token] = data[start:end].decode("utf-8", errors="replace")
        kept = {t: s for t, s in seen.items() if t.lower() not in self._stopwords}
        return list((kept or seen).items())

    def document_count(self, conn: apsw.Connection, term: str) -> int:
        """Chunks holding ``term``, cached for a while: fts5vocab reads the term's whole posting list, and
        the count only sizes the work budget, so a slightly old count is harmless."""
        key = (conn.filename, term)
        now = time.monotonic()
        cached = self._document_counts.get(key)
        if cached is not None and now - cached[0] < DOCUMENT_COUNT_SECONDS:
            return cached[1]
        row = conn.execute(f"SELECT doc FROM {FTS_VOCAB} WHERE term = ?", (term,)).fetchone()
        count = 0 if row is None else int(row[0])
        if len(self._document_counts) > 100_000:
            self._document_counts.clear()
        self._document_counts[key] = (now, count)
        return count

    def _bounded(self, conn: apsw.Connection, terms: list[tuple[str, str]]) -> list[tuple[str, str]]:
        if self._trigram or len(terms) <= 1:
            return terms
        counted = [(self.document_count(conn, term), term, text) for term, text in terms]
        counted.sort()
        kept, total = [], 0
        for docs, term, text in counted:
            if kept and total + docs > self.settings.max_postings:
                break
            kept.append((term, text))
            total += docs
        return kept

    def match_expression(self, conn: apsw.Connection, query: str) -> str | None:
        terms = self._bounded(conn, self.terms(conn, query))
        if not terms:
            return None
        return " OR ".join(fts_string(text) for _, text in terms)

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
            sql = f"SELECT rowid, rank FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH ? ORDER BY rank, rowid LIMIT ?"
            params: list[object] = [expression, k + 1]
        else:
            clauses, params = [], [expression]
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
                params[1:1] = [label_range[0], label_range[1]]
            sql = (
                f"WITH hits AS MATERIALIZED (SELECT rowid AS id, rank FROM {FTS_TABLE}"
                f" WHERE {FTS_TABLE} MATCH ?{bounded})"
                " SELECT h.id, h.rank FROM hits AS h JOIN semantic_chunks AS c ON c.id = h.id"
                f" WHERE {' AND '.join(clauses)} ORDER BY h.rank, h.id LIMIT ?"
            )
            params.append(k + 1)
        rows = conn.execute(sql, params).fetchall()
        result.full = len(rows) > k
        result.items = [(int(label), -float(rank)) for label, rank in rows[:k]]
        return result
