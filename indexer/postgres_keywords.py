"""The keyword list on PostgreSQL: FTS5's BM25, computed in SQL over postings the indexer writes.

PostgreSQL's own full-text ranking (``ts_rank``) is not BM25: it has no IDF and no length normalisation
against the average, so its scores would not fit the ceiling fusion divides by (retrieval/bm25.py). So the
keyword documents are tokenized here, in Python, by the same FTS5 tokenizer SQLite uses (apsw's, on an
in-memory database: ``porter unicode61 remove_diacritics 2`` by default), and stored as postings:

- ``semantic_postings(token, label, freq, length)``: per chunk and token, the column-weighted count of the
  token (body 1.0, previous 0.5, next 0.2, date 2.0 by default: what FTS5's ``bm25()`` weights apply to)
  and the chunk's length in tokens over all four columns;
- ``semantic_terms(token, documents)``: how many chunks hold each token;
- ``semantic_keyword_totals``: how many chunks and tokens there are (FTS5's row count and average length).

A search (``PostgresIndexReader.keyword_candidates``) then scores each matching chunk with FTS5's formula,
``sum over query terms of idf * freq * (k1 + 1) / (freq + k1 * (1 - b + b * length / avgdl))`` with
``idf = max(log((N - n + 0.5) / (n + 0.5)), 1e-6)``, k1 = 1.2, b = 0.75: the same scores SQLite gives
the same documents, up to float rounding (``tests/test_postgres_hybrid.py`` compares them). The column
weights are baked into the postings, so they are part of the keyword signature: changing them rebuilds
the keyword rows (no embedding work), where SQLite applies them at query time.

The documents themselves (a chunk's body, its neighbours' context, its date as words) and the way
neighbours are kept in step are SQLite's: :class:`PostgresKeywordDocuments` reuses
:class:`~obsmem.indexer.keywords.KeywordDocuments` and replaces only the statements that touch the rows.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import apsw

from obsmem.indexer.keywords import COLUMNS, LAYOUT, Context, KeywordDocuments
from obsmem.indexer.state import update_state

# Rows per statement when buffered keyword rows are written.
FLUSH_ROWS = 50_000
# Postings buffered at most before they are written (a rebuild of a million chunks makes about a hundred
# million: held whole, their Python objects would take more than ten gigabytes).
BUFFER_ROWS = 2_000_000
# The FTS5 tokenizer runs on one in-memory SQLite connection per thread (the text never touches a file).
_LOCAL = threading.local()


def fts5_tokens(tokenizer: str, text: str, *, query: bool = False) -> list[str]:
    """The tokens FTS5's ``tokenizer`` (its settings string) makes of ``text``, in order."""
    cache: dict[str, Any] | None = getattr(_LOCAL, "tokenizers", None)
    if cache is None:
        _LOCAL.conn = apsw.Connection(":memory:")
        cache = _LOCAL.tokenizers = {}
    tokenize = cache.get(tokenizer)
    if tokenize is None:
        parts = tokenizer.split()
        tokenize = cache[tokenizer] = _LOCAL.conn.fts5_tokenizer(parts[0], parts[1:])
    reason = apsw.FTS5_TOKENIZE_QUERY if query else apsw.FTS5_TOKENIZE_DOCUMENT
    return [token for _, _, token, *_ in tokenize(text.encode("utf-8"), reason, None)]


def postings_signature(tokenizer: str, context_characters: int, weights: Mapping[Any, float]) -> str:
    """What the postings were made with (layout, tokenizer, context size and the column weights)."""
    return json.dumps(
        {
            "layout": LAYOUT + "+postings-1",  # bump the number as LAYOUT's, never renamed
            "tokenizer": tokenizer,
            "context_characters": context_characters,
            "weights": [float(weights[column]) for column in COLUMNS],
        },
        sort_keys=True,
        separators=(",", ":"),
    )


# Removing chunks' postings keeps the term counts and the totals in step, in one statement (PostgreSQL runs
# every data-modifying WITH part to completion, read or not). A chunk counts as a document when it has a token.
_REMOVE_POSTINGS = """
WITH gone AS (DELETE FROM semantic_postings WHERE label = ANY(?) RETURNING token, label, length),
terms AS (
    UPDATE semantic_terms AS t SET documents = t.documents - g.n
    FROM (SELECT token, count(*) AS n FROM gone GROUP BY token) AS g WHERE t.token = g.token RETURNING 1
),
chunks AS (
    SELECT count(*) AS documents, coalesce(sum(length), 0) AS tokens
    FROM (SELECT DISTINCT label, length FROM gone) AS d
)
UPDATE semantic_keyword_totals SET documents = semantic_keyword_totals.documents - chunks.documents,
    tokens = semantic_keyword_totals.tokens - chunks.tokens FROM chunks
"""
_INSERT_POSTINGS = (
    "INSERT INTO semantic_postings(token, label, freq, length)"
    " SELECT * FROM unnest(?::text[], ?::bigint[], ?::real[], ?::integer[])"
)
_COUNT_TERMS = (
    "INSERT INTO semantic_terms(token, documents) SELECT token, count(*) FROM unnest(?::text[]) AS token"
    " GROUP BY token ON CONFLICT (token) DO UPDATE SET documents = semantic_terms.documents + excluded.documents"
)
_ADD_TOTALS = "UPDATE semantic_keyword_totals SET documents = documents + ?, tokens = tokens + ?"
_TERMS_FROM_POSTINGS = (
    "INSERT INTO semantic_terms(token, documents) SELECT token, count(*) FROM semantic_postings GROUP BY token"
)


_WRITE_CONTEXTS = (
    "INSERT INTO semantic_context(memory_row, previous_row, next_row, digest)"
    " SELECT * FROM unnest(?::bigint[], ?::bigint[], ?::bigint[], ?::bytea[])"
    " ON CONFLICT(memory_row) DO UPDATE SET previous_row = excluded.previous_row,"
    " next_row = excluded.next_row, digest = excluded.digest"
)


@dataclass
class _Rows:
    """Keyword rows waiting to be written together."""

    tokens: list[str] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    freqs: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    contexts: list[tuple[int, int | None, int | None, bytes]] = field(default_factory=list)
    documents: int = 0
    tokens_total: int = 0
    # False in a rebuild, which counts every term once at the end (see PostgresKeywordDocuments.create).
    count_terms: bool = True

    def flush(self, conn: Any) -> None:
        for start in range(0, len(self.tokens), FLUSH_ROWS):
            part = slice(start, start + FLUSH_ROWS)
            conn.execute(_INSERT_POSTINGS, (self.tokens[part], self.labels[part], self.freqs[part], self.lengths[part]))
            if self.count_terms:
                conn.execute(_COUNT_TERMS, (self.tokens[part],))
        if self.documents or self.tokens_total:
            conn.execute(_ADD_TOTALS, (self.documents, self.tokens_total))
        contexts = list({row[0]: row for row in self.contexts}.values())  # one row per memory per statement
        for start in range(0, len(contexts), FLUSH_ROWS):
            columns = list(zip(*contexts[start : start + FLUSH_ROWS], strict=True))
            conn.execute(_WRITE_CONTEXTS, [list(column) for column in columns])


class PostgresKeywordDocuments(KeywordDocuments):
    """The keyword rows of one project schema as postings (methods run inside the caller's transaction)."""

    def __init__(self, tokenizer: str, context_characters: int, column_weights: Mapping[Any, float]) -> None:
        super().__init__(tokenizer, context_characters)
        self.weights = tuple(float(column_weights[column]) for column in COLUMNS)
        self.signature = postings_signature(tokenizer, context_characters, column_weights)
        self._rows: _Rows | None = None
        self._known: dict[int, list[tuple[int, str]]] | None = None

    def tokens(self, text: str, *, query: bool = False) -> list[str]:
        return fts5_tokens(self.tokenizer, text, query=query)

    def postings(self, columns: tuple[str, str, str, str]) -> tuple[dict[str, float], int]:
        """``({token: column-weighted count}, length in tokens)`` of one keyword document."""
        weighted: defaultdict[str, float] = defaultdict(float)
        length = 0
        for text, weight in zip(columns, self.weights, strict=True):
            if not text:
                continue
            found = self.tokens(text)
            length += len(found)
            for token, count in Counter(found).items():
                weighted[token] += weight * count
        return dict(weighted), length

    # -- tables -----------------------------------------------------------------------------------

    def create(self, conn: Any) -> None:
        """Empty the keyword rows and fill them again from the stored chunks and current memories."""
        conn.execute("TRUNCATE semantic_postings, semantic_terms, semantic_context")
        conn.execute("UPDATE semantic_keyword_totals SET documents = 0, tokens = 0")
        # The postings' indexes are dropped while the table fills and built again at the end, as they were:
        # kept, each of a million chunks' hundred postings is a random insert into each (the rebuild spent
        # most of its time there), where building one afresh is one sort. The table is already locked by the
        # TRUNCATE until the commit, so no reader sees it without them.
        from obsmem.storage import index_statements  # the PostgreSQL backend's: loaded where it runs

        indexes = index_statements(conn, "semantic_postings", keys=True)
        for drop, _ in indexes:
            conn.execute(drop)
        # Every chunk's text read at once rather than a statement per memory (held only for the rebuild).
        self._known = {}
        for row, label, text in conn.execute(
            "SELECT memory_row, id, text FROM semantic_chunks ORDER BY memory_row, position"
        ):
            self._known.setdefault(int(row), []).append((int(label), text))
        try:
            with self._buffered(conn, count_terms=False):
                self._fill(conn)
        finally:
            self._known = None
        for _, make in indexes:
            conn.execute(make)
        # The term counts once, from the postings: counted as each part was written, every part updated
        # most terms' rows again, and in one transaction none of those row versions can be vacuumed, so each
        # part's upsert walked longer chains (a million chunks' rebuild slowed to a crawl).
        conn.execute(_TERMS_FROM_POSTINGS)
        # Statistics of the new rows now, not when autovacuum gets to them: the keyword list's plans depend on
        # them (ANALYZE samples a few thousand rows, and unlike VACUUM runs inside the transaction).
        conn.execute("ANALYZE semantic_postings, semantic_terms")
        update_state(conn, fts_tokenizer=self.signature)

    def _chunks(self, conn: Any, row: int) -> list[tuple[int, str]]:
        if self._known is not None:
            return self._known.get(row, [])
        return super()._chunks(conn, row)

    def sync(self, conn: Any, processed: Iterable[int], chunks: dict[int, list[tuple[int, str]]] | None = None) -> int:
        with self._buffered(conn):
            return super().sync(conn, processed, chunks)

    @contextlib.contextmanager
    def _buffered(self, conn: Any, *, count_terms: bool = True) -> Iterator[None]:
        """Collect the rows :meth:`_write` makes and write them in a few statements at the end: a statement
        per memory costs a round trip to the server each, most of a rebuild's time. Safe because a pass
        writes each memory once and reads back only the context of memories it has not written."""
        self._rows = _Rows(count_terms=count_terms)
        try:
            yield
            self._rows.flush(conn)
        finally:
            self._rows = None

    def _write(
        self,
        conn: Any,
        row: int,
        context: Context,
        *,
        replace: bool = False,
        chunks: list[tuple[int, str]] | None = None,
    ) -> None:
        documents = context.rows(self._chunks(conn, row) if chunks is None else chunks)
        if replace:
            conn.execute(_REMOVE_POSTINGS, ([label for label, *_ in documents],))
        rows = self._rows if self._rows is not None else _Rows()
        for label, body, previous, following, date in documents:
            weighted, length = self.postings((body, previous, following, date))
            rows.tokens_total += length
            rows.documents += length > 0
            for token, freq in weighted.items():
                rows.tokens.append(token)
                rows.labels.append(label)
                rows.freqs.append(freq)
                rows.lengths.append(length)
        rows.contexts.append((row, context.previous_row, context.next_row, context.digest))
        if self._rows is None:
            rows.flush(conn)
        elif len(rows.tokens) >= BUFFER_ROWS:  # written early: later writes of the pass touch other memories
            rows.flush(conn)
            self._rows = _Rows(count_terms=rows.count_terms)

    def remove(self, conn: Any, row: int, labels: Iterable[int]) -> None:
        conn.execute(_REMOVE_POSTINGS, (list(labels),))
        conn.execute("DELETE FROM semantic_context WHERE memory_row = ?", (row,))

    @staticmethod
    def _referencing(conn: Any, rows: list[int]) -> list[int]:
        return [
            int(found[0])
            for found in conn.execute(
                "SELECT memory_row FROM semantic_context WHERE previous_row = ANY(?)"
                " UNION SELECT memory_row FROM semantic_context WHERE next_row = ANY(?)",
                (rows, rows),
            )
        ]

    @staticmethod
    def _indexed_among(conn: Any, rows: list[int]) -> set[int]:
        return {
            int(found[0])
            for found in conn.execute("SELECT memory_row FROM semantic_sources WHERE memory_row = ANY(?)", (rows,))
        }
