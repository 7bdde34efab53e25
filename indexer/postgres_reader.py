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

from collections.abc import Callable, Collection, Iterator, Sequence
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
def _postings_of_terms(labels: str = "") -> str:
    """The lateral lookup, each token's postings narrowed by ``labels`` (a condition on ``s.label``) if given."""
    narrowed = f" AND {labels}" if labels else ""
    return (
        " FROM q CROSS JOIN avg CROSS JOIN LATERAL (SELECT s.label, s.freq, s.length FROM semantic_postings AS s"
        f" WHERE s.token = q.token{narrowed} OFFSET 0) AS p"
    )


_SCORE = f"sum(q.idf * (p.freq * {K1 + 1.0}) / (p.freq + {K1} * ({1.0 - B} + {B} * p.length / avg.dl)))"
# Where every chunk of the given memory rows sits.
_POSITIONS = "SELECT memory_row, position, id FROM semantic_chunks WHERE memory_row = ANY(?::bigint[])"
# The given chunks with what validation needs (see reader._VALIDATION): the chunk, its source record, its
# place among its session's observations (or events), whether its source is pending and the text it is
# indexed from, then the hit columns of its memory (positive row) or event (negative row). The indexed text
# goes only when the source is pending (the stale check hashes it, nothing else reads it): a memory's content
# is most of a row, and it goes once more among the hit columns.
_VALIDATION_COLUMNS = (
    "c.id, c.text, s.memory_id, s.content_hash, c.memory_row, c.position, s.chunk_count,"
    " x.previous_row, x.next_row, p.memory_row IS NOT NULL,"
    f" CASE WHEN p.memory_row IS NULL THEN NULL WHEN c.memory_row > 0 THEN m.content ELSE {event_text('e')} END,"
    " coalesce(m.memory_id, obsmem_event_id(e.session_id, e.seq)), coalesce(m.kind, 'event'),"
    " coalesce(m.session_id, e.session_id),"
    f" coalesce(m.date, {event_date('e')}), m.importance, coalesce(m.content, e.content),"
    " e.seq, e.role, e.type, e.tool_name, e.tool_args"
)
_VALIDATION_FROM = (
    " FROM unnest(?::bigint[]) AS wanted(label) JOIN semantic_chunks AS c ON c.id = wanted.label"
    " JOIN semantic_sources AS s ON s.memory_row = c.memory_row"
    " LEFT JOIN memories AS m ON c.memory_row > 0 AND m.id = c.memory_row"
    " LEFT JOIN events AS e ON c.memory_row < 0 AND e.id = -c.memory_row"
    " LEFT JOIN semantic_context AS x ON x.memory_row = c.memory_row"
    " LEFT JOIN semantic_pending AS p ON p.memory_row = c.memory_row"
)
_VALIDATION = f"SELECT {_VALIDATION_COLUMNS}{_VALIDATION_FROM}"
# The validation with one more column: where every chunk of the memories beside the chunk sits, and of its own
# memory when that has more than one chunk (neighbour smoothing's reads, made ahead), as (memory row, position,
# label) triples in a two-dimensional array. They come through the validation's own joins: read in a statement
# of their own, each candidate's chunk and context were looked up a second time, and the candidate's own
# one-chunk memory a third (which its validation row already places).
_VALIDATION_PLACED = (
    f"SELECT {_VALIDATION_COLUMNS}, ARRAY(SELECT ARRAY[k.memory_row, k.position, k.id]"
    " FROM unnest(ARRAY[x.previous_row, x.next_row, CASE WHEN s.chunk_count > 1 THEN c.memory_row END])"
    f" AS beside(memory_row) JOIN semantic_chunks AS k ON k.memory_row = beside.memory_row){_VALIDATION_FROM}"
)
_COSINES = "SELECT chunk, 1 - (embedding <=> ?::vector) FROM semantic_vectors WHERE chunk = ANY(?::bigint[])"
# Each token's count as FTS5's walk newest first gives it, min(documents, bound + 1), from its term row (kept in
# step with its postings in the same transactions): one probe. Only a token at or past the bound still walks
# its newest bound + 1 postings, for the oldest label among them (which of several such tokens reaches
# furthest back decides the rarest); a token under it gets its oldest label from the key's first entry. A
# walk reads a bound's worth of the key, and most of a question's words are under the bound even at 1M chunks.
# The last column is the exact count (common words read it; the keyword list's work bound does not).
_TERMS_POSTINGS = (
    "SELECT u.token, least(coalesce(t.documents, 0), ?::bigint), CASE WHEN t.documents >= ?::bigint THEN"
    " (SELECT min(n.label) FROM (SELECT label FROM semantic_postings AS s WHERE s.token = u.token"
    " ORDER BY label DESC LIMIT ?) AS n)"
    " ELSE (SELECT min(s.label) FROM semantic_postings AS s WHERE s.token = u.token) END, coalesce(t.documents, 0)"
    " FROM unnest(?::text[]) AS u(token) LEFT JOIN semantic_terms AS t ON t.token = u.token"
)
# A token's chunks counted oldest first up to a bound, and the newest label counted.
_POSTINGS_OLDEST = (
    "SELECT count(*), max(label) FROM (SELECT label FROM semantic_postings WHERE token = ? ORDER BY label LIMIT ?) AS n"
)
# The state row's columns and the keyword list's chunk total.
_STATE_AND_TOTAL = f"{STATE_COLUMNS}, (SELECT documents FROM semantic_keyword_totals) AS chunk_total"
# What a readiness check counts of stale chunks at most (retrieval's MAX_STALE_MARGIN).
MAX_STALE_CHUNKS = 1000
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


def _scored(cursor: Any) -> list[tuple[int, float]]:
    return [(int(label), float(score)) for label, score in cursor]


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
        self._ef_search: int | None = None  # hnsw.ef_search as set in this transaction
        # Read ahead by validate_scored in the snapshot: cosines by label, chunk positions by source row.
        self._cosines: dict[int, float] = {}
        self._positions: dict[int, list[tuple[int, int]]] = {}
        self._ahead: list[tuple[str, list[object], list[list[tuple[Any, ...]]]]] = []

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

    def readiness(
        self, kind: str | None = MEMORIES, *, ef_search: int | None = None
    ) -> tuple[IndexState, bool, bool, int, int]:
        """In one exchange: the state row, whether any chunk of ``kind`` is stored (None: of any kind),
        whether any source of that kind is pending, how many chunks the keyword list holds and how many
        indexed chunks of the kinds indexed are stale (up to ``MAX_STALE_CHUNKS``: 0 when nothing is pending,
        at no cost); which kinds the index holds comes with it (:meth:`narrowed`). With ``ef_search``, the
        graph search's ``hnsw.ef_search`` is set for the transaction in the same exchange (every round trip
        counts on a busy server)."""
        # Values written in, not bound: the query string holds several statements. The first row is a
        # quoted literal (the smallest bigint, negated, would be read as a numeric).
        stale = _STALE.replace("?", f"'{int(self.first_row)}'::bigint", 1).replace("?", str(MAX_STALE_CHUNKS), 1)
        sql = (
            f"SELECT {STATE_COLUMNS}, {_KINDS_HELD}, {self._pending_sql(kind)},"
            f" (SELECT documents FROM semantic_keyword_totals), ({stale}) FROM semantic_state WHERE id = 1"
        )
        if ef_search is not None:
            # After the state row, pgvector loaded first (see _hnsw_settings); the cursor stays on the row.
            sql += f"; SELECT '[0]'::vector; SET LOCAL hnsw.ef_search = {int(ef_search)}"
            self._ef_search = int(ef_search)
        cursor = self.conn.execute(sql)
        row = cursor.fetchone()
        assert row is not None
        state = self._state = IndexState(row[0], row[1], row[2], bool(row[3]), *row[4:11])
        memories, events = self._kinds_held = (bool(row[11]), bool(row[12]))
        stored = {MEMORIES: memories, EVENTS: events}.get(kind or "", memories or events)
        return state, stored, bool(row[13]), int(row[14]), int(row[15])

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

    def state_chunks_and_postings(
        self, terms: list[str], bound: int
    ) -> tuple[IndexState, int, list[tuple[int, int]], list[int]]:
        """:meth:`state`, :meth:`keyword_chunks`, :meth:`term_postings_many` of ``terms`` and each term's exact
        chunk count (the terms table keeps it) in one statement. As the reader's first read it goes alone, in
        a transaction of its own opened and committed in the same exchange (``execute_alone``): a reader used
        for nothing else costs one exchange and no commit."""
        firsts = self._first_tokens(terms)
        wanted = [token for token in firsts if token]
        rows = self.conn.execute_alone(
            f"SELECT {_STATE_AND_TOTAL}, c.* FROM semantic_state"
            f" LEFT JOIN ({_TERMS_POSTINGS}) AS c(token, documents, oldest, exact) ON true WHERE id = 1",
            (bound + 1, bound + 1, bound + 1, wanted),
        ).fetchall()
        row = rows[0]
        state = IndexState(row[0], row[1], row[2], bool(row[3]), *row[4:11])
        counted = {
            token: (int(count), int(oldest or 0), int(exact))
            for *_, token, count, oldest, exact in rows
            if token is not None
        }
        found = [counted.get(token, (0, 0, 0)) if token else (0, 0, 0) for token in firsts]
        return state, int(row[11]), [(count, oldest) for count, oldest, _ in found], [exact for *_, exact in found]

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
        return self.term_postings_many([term], bound)[0]

    def term_postings_oldest(self, term: str, bound: int) -> tuple[int, int]:
        (token,) = self._first_tokens([term])
        if not token:
            return 0, 0
        count, newest = self._one(_POSTINGS_OLDEST, (token, bound + 1))
        return int(count), int(newest or 0)

    def _first_tokens(self, terms: list[str]) -> list[str]:
        """Each term's first index token, whose postings stand for the term's ("" for a term with none)."""
        return [tokens[0] if tokens else "" for tokens in (self.keywords.tokens(term, query=True) for term in terms)]

    def term_postings_many(self, terms: list[str], bound: int) -> list[tuple[int, int]]:
        """:meth:`term_postings` of each of ``terms``, in one statement (one exchange for the query's terms)."""
        firsts = self._first_tokens(terms)
        wanted = [token for token in firsts if token]
        if not wanted:
            return [(0, 0)] * len(terms)
        rows = self._rows(_TERMS_POSTINGS, (bound + 1, bound + 1, bound + 1, wanted))
        counted = {token: (int(count), int(oldest or 0)) for token, count, oldest, _ in rows}
        return [counted.get(token, (0, 0)) if token else (0, 0) for token in firsts]

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
        newest = ""
        postings = _postings_of_terms()
        conditions: list[str] = []
        bounds = ""
        if where is not None and not where.is_open:
            clauses, values = _filter_clauses(where)
            if clauses:
                joins = " JOIN semantic_chunks AS c ON c.id = p.label"
                conditions += clauses
                window = Filter(where.lower, where.upper, where.session_id)
                if label_range is None and not window.is_open:
                    # Each token's postings read only over the labels of the window's chunks (their first and
                    # last, from the date or session index: chunks are mostly labelled in date order), where
                    # a common word's whole list at a million chunks is hundreds of thousands of postings,
                    # each joined to its chunk for the filter: a minute per search. The filter still decides.
                    window_clauses, window_values = _filter_clauses(window, "w")
                    bounds = (
                        ", bounds AS MATERIALIZED (SELECT min(w.id) AS lo, max(w.id) AS hi FROM semantic_chunks AS w"
                        f" WHERE {' AND '.join(window_clauses)})"
                    )
                    postings = _postings_of_terms("s.label BETWEEN (SELECT lo FROM bounds) AND (SELECT hi FROM bounds)")
                    params += window_values
                params += values
        elif recent is not None and len(tokens) == 1:
            # One token (the usual bounded search: its rarest term alone is past the bound, so it is the only
            # one kept): its newest ``recent`` postings are the chunks scored, read once from the key's end.
            postings = (
                " FROM q CROSS JOIN avg CROSS JOIN LATERAL (SELECT s.label, s.freq, s.length FROM semantic_postings"
                " AS s WHERE s.token = q.token ORDER BY s.label DESC LIMIT ?) AS p"
            )
            params.append(recent)
        elif recent is not None:
            # The newest ``recent`` chunks holding any of the tokens: each token's newest, merged. They are
            # exactly the chunks holding one from the oldest of them on, so each token's postings are read
            # from that label up (a range of the (token, label) key), not whole: a common word's list at a
            # million chunks is a hundred thousand postings or more.
            newest = (
                ", newest AS MATERIALIZED (SELECT DISTINCT n.label FROM unnest(?::text[]) AS r(token), LATERAL"
                " (SELECT label FROM semantic_postings AS s WHERE s.token = r.token ORDER BY label DESC LIMIT ?)"
                " AS n ORDER BY n.label DESC LIMIT ?)"
            )
            postings = _postings_of_terms("s.label >= (SELECT min(label) FROM newest)")
            joins = " JOIN newest ON newest.label = p.label"
            params += [tokens, recent, recent]
        if label_range is not None:
            conditions.append("p.label BETWEEN ? AND ?")
            params += [label_range[0], label_range[1]]
        where_sql = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        sql = (
            f"WITH {_TERMS}{newest}{bounds} SELECT p.label, {_SCORE} AS score{postings}{joins}{where_sql}"
            " GROUP BY p.label ORDER BY score DESC, p.label LIMIT ?"
        )
        params.append(k)
        return [(int(label), float(score)) for label, score in self._rows(sql, params)]

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

    def vector_candidates_later(
        self, query: np.ndarray, k: int, where: Filter, *, exact_max: int | None, ef_search: int
    ) -> Callable[[], list[tuple[int, float]]]:
        """:meth:`vector_candidates`' list, an open search's statement sent with the reader's next one (the
        keyword list's: one exchange for both) and its rows read when the returned function is called. A
        filtered search is run at once."""
        if not where.is_open:  # a window, a session or a kind of source: a filtered search
            found, _ = self.vector_candidates(query, k, where, exact_max=exact_max, ef_search=ef_search)
            return lambda: found
        box = self._send_ahead(*self._graph_statement(vector_literal(query), k, "", [], ef_search))

        def rows() -> list[tuple[int, float]]:
            if not box:
                self._rows("SELECT 1", ())  # nothing went since: the statement goes alone
            return _scored(box[0])

        return rows

    def _graph(
        self, literal: str, k: int, filtered: str, values: list[object], ef_search: int
    ) -> list[tuple[int, float]]:
        return _scored(self._rows(*self._graph_statement(literal, k, filtered, values, ef_search)))

    def _graph_statement(
        self, literal: str, k: int, filtered: str, values: list[object], ef_search: int
    ) -> tuple[str, list[object]]:
        wanted = int(max(ef_search, k))
        if self._ef_search != wanted:  # readiness() usually set it already, in its own exchange
            self._hnsw_settings(f"SET LOCAL hnsw.ef_search = {wanted}")
            self._ef_search = wanted
        sql = (
            "SELECT chunk, score FROM (SELECT v.chunk, 1 - (v.embedding <=> ?::vector) AS score,"
            f" v.embedding <=> ?::vector AS distance FROM semantic_vectors AS v{filtered}"
            " ORDER BY distance LIMIT ?) AS nearest ORDER BY score DESC, chunk"
        )
        return sql, [literal, literal, *values, k]

    def _hnsw_settings(self, settings: str) -> None:
        """Set ``hnsw.*`` settings for this transaction, in one round trip after making sure this
        connection's server process has loaded pgvector: loading it discards earlier settings of its prefix
        (PostgreSQL's reserved GUC prefixes), which would leave ``hnsw.ef_search`` at 40 and cut every
        graph search to 40 results."""
        self.conn.raw.execute(f"SELECT '[0]'::vector; {settings}")

    def _send_ahead(self, sql: str, params: list[object]) -> list[list[tuple[Any, ...]]]:
        """Queue a read to go with the reader's next statement; its rows land in the returned box then."""
        box: list[list[tuple[Any, ...]]] = []
        self._ahead.append((sql, params, box))
        return box

    def _rows(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        """One read's rows, in one exchange with any reads queued ahead of it (see :meth:`_send_ahead`)."""
        ahead, self._ahead = self._ahead, []
        if not ahead:
            return self.conn.execute(sql, params).fetchall()
        results = self.conn.execute_batch([*((q, p) for q, p, _ in ahead), (sql, params)])
        for (_, _, box), rows in zip(ahead, results, strict=False):
            box.append(rows)
        return results[-1]

    def cosines(self, query: np.ndarray, labels: Collection[int]) -> dict[int, float]:
        """Exact cosines of the query with the stored embeddings of ``labels`` (those :meth:`validate_scored`
        read already are not read again)."""
        known = self._cosines
        missing = [label for label in labels if label not in known]
        if missing:
            rows = self._rows(_COSINES, (vector_literal(query), missing))
            known.update((int(label), float(score)) for label, score in rows)
        return {label: known[label] for label in labels if label in known}

    # -- validation, neighbours, vectors --------------------------------------------------------

    def validate(self, labels: Collection[int], where: Filter) -> dict[int, ValidChunk]:
        if not labels:
            return {}
        return _checked(self._rows(_VALIDATION, (sorted(labels),)), where)  # type: ignore[arg-type]

    def validate_scored(
        self, labels: Collection[int], where: Filter, query: np.ndarray | None
    ) -> dict[int, ValidChunk]:
        """:meth:`validate`, and in the same exchange what ranking the candidates asks next: their exact
        cosines with ``query`` (for :meth:`cosines`) and where every chunk of the memories beside them (and
        of their own memories of several chunks) sits (for :meth:`chunk_positions`, through the validation's
        own joins: :data:`_VALIDATION_PLACED`). A candidate that fails validation costs a
        few rows read for nothing. (The neighbours' own validation is not read ahead: their rows, with their
        text, cost the server and the client more than the exchange they would save.)"""
        if not labels:
            return {}
        ordered = sorted(labels)
        statements: list[tuple[str, Sequence[object]]] = [(_VALIDATION_PLACED, (ordered,))]
        if query is not None:
            statements.append((_COSINES, (vector_literal(query), ordered)))
        checked, *scored = self.conn.execute_batch(statements)
        placed: dict[int, set[tuple[int, int]]] = {}  # a memory beside two candidates comes twice
        for row in checked:
            count, previous, following = row[6:9]
            for memory_row in (previous, following, row[4] if count > 1 else None):
                if memory_row is not None:
                    placed.setdefault(int(memory_row), set())
            for memory_row, position, label in row[-1]:
                placed.setdefault(int(memory_row), set()).add((int(position), int(label)))
        for memory_row, chunks in placed.items():
            self._positions.setdefault(memory_row, sorted(chunks))
        for rows in scored:
            self._cosines.update((int(label), float(score)) for label, score in rows)
        return _checked((row[:-1] for row in checked), where)  # type: ignore[arg-type]

    def chunk_positions(self, memory_rows: Collection[int]) -> Iterator[tuple[int, int, int]]:
        known = self._positions
        missing = sorted(row for row in memory_rows if row not in known)
        if missing:
            for memory_row in missing:
                known[memory_row] = []
            for memory_row, position, label in self._rows(_POSITIONS, (missing,)):
                known[int(memory_row)].append((int(position), int(label)))
        return ((row, position, label) for row in memory_rows for position, label in known[row])

    def embeddings(self, labels: Collection[int]) -> Iterator[tuple[int, np.ndarray]]:
        rows = self.conn.execute(
            "SELECT chunk, embedding::text FROM semantic_vectors WHERE chunk = ANY(?)", (sorted(labels),)
        )
        for label, text in rows:
            yield int(label), parse_vector(text)
