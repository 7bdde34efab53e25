""":class:`~obsmem.indexer.reader.IndexReader` on PostgreSQL, plus the vector reads SQLite answers in memory.

One reader per search, bound to one ``REPEATABLE READ`` snapshot of the project's schema. The keyword list
is FTS5's BM25 computed in SQL over the postings (:mod:`obsmem.indexer.postgres_keywords`); the vector
list is pgvector's: the HNSW index (cosine distance, ``hnsw.ef_search`` from the settings) for an open
search, an exact scan of the window's vectors for a filtered one up to ``exact_scan_max_chunks`` (so a date
window never loses a chunk to the graph), the HNSW index with pgvector's iterative filtered scan above it.
Scores are cosines (``1 - distance``), higher is better, ties by label, as the in-memory vectors give them.

Conversation events are indexed beside memories when ``semantic.index.events`` is on, under their negated
row as on SQLite (:mod:`obsmem.indexer.postgres_events`): a search's filter may keep one kind of source
(``c.memory_row > 0`` or ``< 0``), and the counts, pending checks and validation cover the kinds indexed.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import replace
from typing import Any

import numpy as np

from obsmem.indexer import stores
from obsmem.indexer.postgres_events import EVENTS_UNMARKED, indexed_count, kind_condition
from obsmem.indexer.postgres_keywords import PostgresKeywordDocuments
from obsmem.indexer.reader import ValidChunk, _checked
from obsmem.indexer.sources import event_date, event_text
from obsmem.indexer.state import STATE_COLUMNS, IndexState
from obsmem.indexer.vectors import EVENTS, MEMORIES, Filter

# FTS5's bm25() constants (SQLite's fts5_aux.c), as retrieval/bm25.py assumes them for the ceiling.
K1 = 1.2
B = 0.75

# The query's terms with FTS5's IDF over the current totals (a term nobody holds has the largest IDF).
_TERMS = (
    "q AS MATERIALIZED (SELECT u.token, greatest(ln(((tot.documents - coalesce(t.documents, 0))::float8 + 0.5)"
    " / (coalesce(t.documents, 0)::float8 + 0.5)), 1e-6) AS idf FROM unnest(?::text[]) AS u(token)"
    " CROSS JOIN semantic_keyword_totals AS tot LEFT JOIN semantic_terms AS t ON t.token = u.token),"
    " avg AS MATERIALIZED (SELECT tokens::float8 / greatest(documents, 1) AS dl FROM semantic_keyword_totals)"
)
# Each query token's postings read through the (token, label) key: a lateral lookup per token, whatever the
# planner's statistics say (without them it scanned every posting and joined the tokens afterwards).
# ``OFFSET 0`` keeps the lookup lateral: a plain subquery is pulled up into a join, and with the one-row
# totals table not analysed yet (a new project, before autovacuum) the join read the whole postings index
# (125 ms at 3,000 chunks, against 8 ms with the fence).
_POSTINGS_OF_TERMS = (
    " FROM q CROSS JOIN avg CROSS JOIN LATERAL (SELECT s.label, s.freq, s.length FROM semantic_postings AS s"
    " WHERE s.token = q.token OFFSET 0) AS p"
)
_SCORE = f"sum(q.idf * (p.freq * {K1 + 1.0}) / (p.freq + {K1} * ({1.0 - B} + {B} * p.length / avg.dl)))"
# Where every chunk of the given memory rows sits.
_POSITIONS = "SELECT memory_row, position, id FROM semantic_chunks WHERE memory_row = ANY(?)"
# The given chunks with what validation needs (see reader._VALIDATION): the chunk, its source record, its
# place among its session's observations (or events), whether its source is pending and the text it is
# indexed from, then the hit columns of its memory (positive row) or event (negative row).
_VALIDATION = (
    "SELECT c.id, c.text, s.memory_id, s.content_hash, c.memory_row, c.position, s.chunk_count,"
    " x.previous_row, x.next_row, p.memory_row IS NOT NULL,"
    f" CASE WHEN c.memory_row > 0 THEN m.content ELSE {event_text('e')} END,"
    " coalesce(m.memory_id, obsmem_event_id(e.session_id, e.seq)), coalesce(m.kind, 'event'),"
    " coalesce(m.session_id, e.session_id),"
    f" coalesce(m.date, {event_date('e')}), m.importance, coalesce(m.content, e.content),"
    " e.seq, e.role, e.type, e.tool_name, e.tool_args"
    " FROM unnest(?::bigint[]) AS wanted(label) JOIN semantic_chunks AS c ON c.id = wanted.label"
    " JOIN semantic_sources AS s ON s.memory_row = c.memory_row"
    " LEFT JOIN memories AS m ON c.memory_row > 0 AND m.id = c.memory_row"
    " LEFT JOIN events AS e ON c.memory_row < 0 AND e.id = -c.memory_row"
    " LEFT JOIN semantic_context AS x ON x.memory_row = c.memory_row"
    " LEFT JOIN semantic_pending AS p ON p.memory_row = c.memory_row"
)
# Indexed chunks whose source is pending, among the kinds indexed (markers at or below the first row wait).
_STALE = (
    "SELECT count(*) FROM (SELECT 1 FROM semantic_pending AS p"
    " JOIN semantic_chunks AS c ON c.memory_row = p.memory_row WHERE p.memory_row > ? LIMIT ?) AS stale"
)
# Whether the index holds chunks of each kind (an index seek each): a kind filter that keeps everything is
# dropped, as SQLite's in-memory vectors drop it (VectorSet.narrowed).
_KINDS_HELD = (
    "EXISTS (SELECT 1 FROM semantic_chunks WHERE memory_row > 0),"
    " EXISTS (SELECT 1 FROM semantic_chunks WHERE memory_row < 0)"
)


def vector_literal(vector: np.ndarray) -> str:
    """pgvector's text form of ``vector`` (``[0.1,0.2,...]``; float32 values print exactly as they parse)."""
    return "[" + ",".join(map(str, np.asarray(vector, dtype=np.float32).tolist())) + "]"


def parse_vector(text: str) -> np.ndarray:
    return np.array(text[1:-1].split(","), dtype=np.float32)


def _filter_clauses(where: Filter, alias: str = "c") -> tuple[list[str], list[object]]:
    """SQL conditions (and their parameters) for a date and session filter on chunks ``alias``."""
    clauses: list[str] = []
    params: list[object] = []
    if where.lower is not None:
        clauses.append(f"{alias}.date >= ?")
        params.append(where.lower)
    if where.upper is not None:
        clauses.append(f"{alias}.date <= ?")
        params.append(where.upper)
    if where.session_id is not None:
        clauses.append(f"{alias}.session_id = ?")
        params.append(where.session_id)
    kind = kind_condition(where.kind, alias)
    if kind is not None:
        clauses.append(kind)
    return clauses, params


class PostgresIndexReader:
    """The reads of one hybrid search on one PostgreSQL read transaction (the caller's snapshot)."""

    def __init__(self, conn: Any, schema: str, keywords: PostgresKeywordDocuments, *, events: bool = False) -> None:
        """``events``: conversation events are indexed (``semantic.index.events``); otherwise their markers
        wait unread and every count is of memories."""
        self.conn = conn
        self.schema = schema
        self.keywords = keywords
        self.events = events
        # The sources counted when no kind is asked for, and the lowest marker row read (as SqliteIndexReader).
        self.default_kind = None if events else MEMORIES
        self.first_row = -(2**63) if events else 0
        self._state: IndexState | None = None
        self._kinds_held: tuple[bool, bool] | None = None  # (memory chunks, event chunks), read with readiness

    @property
    def source(self) -> str:
        return self.schema

    def _one(self, sql: str, params: tuple[object, ...] = ()) -> tuple[Any, ...]:
        row = self.conn.execute(sql, params).fetchone()
        assert row is not None  # an aggregate without GROUP BY always returns one row
        return tuple(row)

    # -- readiness ------------------------------------------------------------------------------

    def state(self) -> IndexState:
        # One snapshot (REPEATABLE READ): the row read once is the row for the reader's whole life.
        if self._state is None:
            self._state = IndexState.read(self.conn)
        return self._state

    def source_count(self, kind: str | None = None) -> int:
        return stores.source_count(self.conn, kind or self.default_kind)

    def indexed_count(self, kind: str | None = None) -> int:
        return indexed_count(self.conn, kind or self.default_kind)

    def has_pending(self, kind: str | None = None) -> bool:
        return bool(self._one(f"SELECT {self._pending_sql(kind)}")[0])

    def _pending_sql(self, kind: str | None) -> str:
        """SQL for whether a source of ``kind`` (None: the kinds indexed) waits for the indexer: a marker,
        or with events indexed an event above the watermark, not marked yet."""
        kind = kind or self.default_kind
        if kind == EVENTS and not self.events:
            return "false"  # event markers wait unread while events are not indexed
        condition = kind_condition(kind, "p")
        sql = f"EXISTS (SELECT 1 FROM semantic_pending AS p{f' WHERE {condition}' if condition else ''})"
        return f"({sql} OR {EVENTS_UNMARKED})" if self.events and kind != MEMORIES else sql

    def stale_chunks(self, cap: int) -> int:
        return int(self._one(_STALE, (self.first_row, cap))[0])

    def readiness(self, kind: str | None = MEMORIES) -> tuple[IndexState, bool, bool, int]:
        """In one statement: the state row, whether any chunk of ``kind`` is stored (None: of any kind),
        whether any source of that kind is pending and how many chunks the keyword list holds (every round
        trip counts on a busy server); which kinds the index holds comes with it (:meth:`narrowed`)."""
        row = self._one(
            f"SELECT {STATE_COLUMNS}, {_KINDS_HELD}, {self._pending_sql(kind)},"
            " (SELECT documents FROM semantic_keyword_totals) FROM semantic_state WHERE id = 1"
        )
        state = self._state = IndexState(row[0], row[1], row[2], bool(row[3]), *row[4:11])
        memories, events = self._kinds_held = (bool(row[11]), bool(row[12]))
        stored = {MEMORIES: memories, EVENTS: events}.get(kind or "", memories or events)
        return state, stored, bool(row[13]), int(row[14])

    def narrowed(self, where: Filter) -> Filter:
        """``where`` without a kind that keeps every indexed chunk (the index holds only that kind): an open
        search then stays open, on the HNSW index, as on SQLite (after :meth:`readiness`)."""
        if where.kind is None:
            return where
        if self._kinds_held is None:
            self._kinds_held = tuple(bool(held) for held in self._one(f"SELECT {_KINDS_HELD}"))  # type: ignore[assignment]
        memories, events = self._kinds_held  # type: ignore[misc]
        everything = not memories if where.kind == EVENTS else not events
        return replace(where, kind=None) if everything else where

    def keyword_chunks(self) -> int:
        """How many chunks the keyword list holds (FTS5's row count: the N of every IDF)."""
        return int(self._one("SELECT documents FROM semantic_keyword_totals")[0])

    def has_vectors(self) -> bool:
        return bool(self._one("SELECT EXISTS (SELECT 1 FROM semantic_vectors)")[0])

    # -- keyword candidates ---------------------------------------------------------------------

    def keyword_terms(self, words: list[str]) -> list[tuple[str, list[str]]]:
        found = []
        for word in words:
            tokens = self.keywords.tokens(word, query=True)
            if tokens:
                found.append((word, tokens))
        return found

    def _query_tokens(self, terms: list[str]) -> list[str]:
        """The tokens of the query's terms, one per term as FTS5 scores one phrase per quoted term (a word
        the tokenizer splits into several counts as each of them: FTS5 would match them as a phrase)."""
        return [token for term in terms for token in self.keywords.tokens(term, query=True)]

    def counts_postings(self) -> bool:
        return True

    def term_postings(self, term: str, bound: int) -> tuple[int, int]:
        tokens = self.keywords.tokens(term, query=True)
        if not tokens:
            return 0, 0
        count, oldest = self._one(
            "SELECT count(*), min(label) FROM (SELECT label FROM semantic_postings WHERE token = ?"
            " ORDER BY label DESC LIMIT ?) AS newest",
            (tokens[0], bound + 1),
        )
        return int(count), int(oldest or 0)

    def keyword_candidates(
        self,
        terms: list[str],
        k: int,
        where: Filter | None = None,
        *,
        label_range: tuple[int, int] | None = None,
        recent: int | None = None,
    ) -> list[tuple[int, float]]:
        tokens = self._query_tokens(terms)
        if not tokens:
            return []
        params: list[object] = [tokens]
        joins = ""
        conditions: list[str] = []
        if where is not None and not where.is_open:
            clauses, values = _filter_clauses(where)
            if clauses:
                joins = " JOIN semantic_chunks AS c ON c.id = p.label"
                conditions += clauses
                params += values
        elif recent is not None:
            # The newest ``recent`` chunks holding any of the tokens: each token's newest, merged.
            joins = (
                " JOIN (SELECT DISTINCT n.label FROM unnest(?::text[]) AS r(token), LATERAL (SELECT label FROM"
                " semantic_postings AS s WHERE s.token = r.token ORDER BY label DESC LIMIT ?) AS n"
                " ORDER BY n.label DESC LIMIT ?) AS newest ON newest.label = p.label"
            )
            params += [tokens, recent, recent]
        if label_range is not None:
            conditions.append("p.label BETWEEN ? AND ?")
            params += [label_range[0], label_range[1]]
        where_sql = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        sql = (
            f"WITH {_TERMS} SELECT p.label, {_SCORE} AS score{_POSTINGS_OF_TERMS}{joins}{where_sql}"
            " GROUP BY p.label ORDER BY score DESC, p.label LIMIT ?"
        )
        params.append(k)
        return [(int(label), float(score)) for label, score in self.conn.execute(sql, params)]

    # -- vectors --------------------------------------------------------------------------------

    def vector_candidates(
        self, query: np.ndarray, k: int, where: Filter, *, exact_max: int | None, ef_search: int
    ) -> tuple[list[tuple[int, float]], bool]:
        """Top-k chunks by cosine inside ``where`` (filter first, then rank) and whether the graph was used.

        Open: the HNSW index. Filtered: an exact scan of the window's vectors (the window is read first,
        in a materialised part the planner cannot turn into an index scan of the graph), unless
        ``exact_max`` is set and the window holds more chunks, which then use the HNSW index with
        pgvector's iterative scan in strict order, the filter applied during the graph search."""
        literal = vector_literal(query)
        clauses, values = _filter_clauses(where)
        if not clauses:
            return self._graph(literal, k, "", [], ef_search), True
        if exact_max is not None:
            counted = self._one(
                f"SELECT count(*) FROM (SELECT 1 FROM semantic_chunks AS c WHERE {' AND '.join(clauses)}"
                " LIMIT ?) AS win",
                (*values, exact_max + 1),
            )[0]
            if counted > exact_max:
                self._hnsw_settings("SET LOCAL hnsw.iterative_scan = strict_order")
                filtered = f" JOIN semantic_chunks AS c ON c.id = v.chunk WHERE {' AND '.join(clauses)}"
                return self._graph(literal, k, filtered, values, ef_search), True
        rows = self.conn.execute(
            f"WITH win AS MATERIALIZED (SELECT c.id FROM semantic_chunks AS c WHERE {' AND '.join(clauses)})"
            " SELECT v.chunk, 1 - (v.embedding <=> ?::vector) AS score FROM win"
            " JOIN semantic_vectors AS v ON v.chunk = win.id ORDER BY score DESC, v.chunk LIMIT ?",
            (*values, literal, k),
        )
        return [(int(label), float(score)) for label, score in rows], False

    def _graph(
        self, literal: str, k: int, filtered: str, values: list[object], ef_search: int
    ) -> list[tuple[int, float]]:
        self._hnsw_settings(f"SET LOCAL hnsw.ef_search = {int(max(ef_search, k))}")
        rows = self.conn.execute(
            "SELECT chunk, score FROM (SELECT v.chunk, 1 - (v.embedding <=> ?::vector) AS score,"
            f" v.embedding <=> ?::vector AS distance FROM semantic_vectors AS v{filtered}"
            " ORDER BY distance LIMIT ?) AS nearest ORDER BY score DESC, chunk",
            (literal, literal, *values, k),
        )
        return [(int(label), float(score)) for label, score in rows]

    def _hnsw_settings(self, settings: str) -> None:
        """Set ``hnsw.*`` settings for this transaction, in one round trip after making sure this
        connection's server process has loaded pgvector: loading it discards earlier settings of its prefix
        (PostgreSQL's reserved GUC prefixes), which would leave ``hnsw.ef_search`` at 40 and cut every
        graph search to 40 results."""
        self.conn.raw.execute(f"SELECT '[0]'::vector; {settings}")

    def cosines(self, query: np.ndarray, labels: Collection[int]) -> dict[int, float]:
        """Exact cosines of the query with the stored embeddings of ``labels``."""
        if not labels:
            return {}
        rows = self.conn.execute(
            "SELECT chunk, 1 - (embedding <=> ?::vector) FROM semantic_vectors WHERE chunk = ANY(?)",
            (vector_literal(query), list(labels)),
        )
        return {int(label): float(score) for label, score in rows}

    # -- validation, neighbours, vectors --------------------------------------------------------

    def validate(self, labels: Collection[int], where: Filter) -> dict[int, ValidChunk]:
        if not labels:
            return {}
        return _checked(self.conn.execute(_VALIDATION, (sorted(labels),)), where)  # type: ignore[arg-type]

    def chunk_positions(self, memory_rows: Collection[int]) -> Iterator[tuple[int, int, int]]:
        rows = self.conn.execute(_POSITIONS, (sorted(memory_rows),))
        return ((int(row), int(position), int(label)) for row, position, label in rows)

    def embeddings(self, labels: Collection[int]) -> Iterator[tuple[int, np.ndarray]]:
        rows = self.conn.execute(
            "SELECT chunk, embedding::text FROM semantic_vectors WHERE chunk = ANY(?)", (sorted(labels),)
        )
        for label, text in rows:
            yield int(label), parse_vector(text)
