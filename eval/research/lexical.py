"""BM25 over SQLite FTS5 (through apsw), with the query construction the study compares.

One in-memory FTS5 table per corpus. A document may have several columns (for example the turn text and
the speaker's name) so column weights can be measured; ``bm25(table, w1, w2, ...)`` is FTS5's built-in
Okapi BM25 with k1 = 1.2 and b = 0.75 (fixed by SQLite), negative and lower-is-better.

User text never reaches FTS5 syntax unescaped: :func:`match_expression` quotes every term.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import apsw

# Words that carry no topic in a question. Kept short on purpose: function words, question words and
# auxiliaries of English, nothing specific to one dataset. Every term left after this list is OR-ed, and
# BM25's idf already down-weights the common ones; the list only removes terms that match nearly every
# document and so add noise to the ranking of short texts.
_STOPWORD_TEXT = """
a about above after again against all am an and any are as at be because been before being below between
both but by can could did do does doing done down during each few for from further had has have having he
her here hers herself him himself his how i if in into is it its itself just me more most my myself no nor
not now of off on once only or other our ours ourselves out over own same she should so some such than that
the their theirs them themselves then there these they this those through to too under until up very was we
were what when where which while who whom why will with would you your yours yourself yourselves
s t ll ve re d m
"""
STOPWORDS: frozenset[str] = frozenset(_STOPWORD_TEXT.split())

_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*", re.UNICODE)
_ORDINAL = re.compile(r"(\d+)(?:st|nd|rd|th)")


def words(text: str) -> list[str]:
    """Lowercased word tokens without possessive or contraction suffixes (``Caroline's`` -> ``caroline``)."""
    out = []
    for token in _WORD.findall(text.lower()):
        head = re.split(r"['\u2019]", token)[0]
        if head:
            # "8th" matches the "8" of a date written as words ("8 December 2023")
            ordinal = _ORDINAL.fullmatch(head)
            out.append(ordinal.group(1) if ordinal else head)
    return out


def content_terms(text: str, stopwords: frozenset[str] = STOPWORDS) -> list[str]:
    """Distinct query terms in order of first occurrence, stopwords removed (all words if nothing is left)."""
    tokens = words(text)
    kept = [t for t in tokens if t not in stopwords]
    chosen = kept or tokens
    return list(dict.fromkeys(chosen))


def quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def match_expression(terms: Sequence[str], operator: str = "OR") -> str:
    """An FTS5 MATCH expression: every term quoted, joined by ``OR`` (or ``AND``)."""
    if operator not in ("OR", "AND"):
        raise ValueError("operator must be OR or AND")
    return f" {operator} ".join(quote(t) for t in terms)


@dataclass(frozen=True)
class LexicalHit:
    doc: int
    score: float  # higher is better (the negated FTS5 bm25)


class Fts5Index:
    """An in-memory FTS5 table over documents given as tuples of column texts."""

    def __init__(
        self,
        documents: Iterable[Sequence[str]],
        columns: Sequence[str] = ("body",),
        tokenize: str = "porter unicode61 remove_diacritics 2",
    ) -> None:
        self.columns = tuple(columns)
        self.db = apsw.Connection(":memory:")
        cols = ", ".join(self.columns)
        self.db.execute(f"CREATE VIRTUAL TABLE docs USING fts5({cols}, tokenize = {quote_sql(tokenize)})")
        marks = ", ".join("?" for _ in self.columns)
        with self.db:
            self.db.executemany(
                f"INSERT INTO docs(rowid, {cols}) VALUES (?, {marks})", ((i, *doc) for i, doc in enumerate(documents))
            )

    def search(self, expression: str, limit: int, weights: Sequence[float] | None = None) -> list[LexicalHit]:
        if not expression:
            return []
        weight_args = "".join(f", {float(w)}" for w in (weights or [1.0] * len(self.columns)))
        sql = f"SELECT rowid, bm25(docs{weight_args}) AS s FROM docs WHERE docs MATCH ? ORDER BY s LIMIT ?"
        return [LexicalHit(int(r), -float(s)) for r, s in self.db.execute(sql, (expression, limit))]


def quote_sql(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
