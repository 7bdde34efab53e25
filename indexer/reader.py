"""What retrieval may ask of the semantic index's storage: the :class:`IndexReader` contract and its SQLite
implementation.

The indexer owns its tables; retrieval never names them. One hybrid search opens one reader
(:meth:`obsmem.indexer.project.ProjectIndex.reader`), bound to one read snapshot, and asks it for:

- readiness — the index state row, how many memories exist and how many are indexed, whether any are
  pending and how many indexed chunks a pending change may have made stale;
- keyword candidates — which query words the keyword index can match, how many chunks hold a term
  (counted up to a bound) and the top chunks for a set of terms, inside a filter, best first;
- validation — which candidate chunks still describe their current memory and pass the filter, with the
  memory's hit columns and where the chunk sits (for neighbour smoothing);
- neighbour positions — where every chunk of some memories sits;
- vectors for ids — stored embeddings of chunks the in-memory vectors do not hold yet.

Vector candidates come from the in-memory :class:`~obsmem.indexer.vectors.VectorSet`, not from here.

Dialect details stay on this side: ``json_each`` for a list of ids in one prepared statement, the FTS5
tokenizer, quoting and ``OR`` syntax of a match, ``bm25()`` with per-column weights and its sign
(negative, lower better: turned into higher-is-better here). Another backend (PostgreSQL with pgvector and
full-text search) implements the same :class:`IndexReader`; see docs/storage.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterator, Mapping
from typing import Any, NamedTuple, Protocol

import apsw
import numpy as np

from obsmem.indexer import stores
from obsmem.indexer.keywords import COLUMNS, CONTEXT_TABLE, FTS_TABLE
from obsmem.indexer.sources import UNMARKED_EVENTS, event_date, event_text
from obsmem.indexer.state import IndexState
from obsmem.indexer.vectors import EVENTS, MEMORIES, Filter


class ValidChunk(NamedTuple):
    """A candidate chunk that still describes its current memory and passes the search's filter.

    A named tuple: a search builds one for each of a few hundred candidates, three times faster than a
    frozen dataclass, and nothing compares or changes them."""

    label: int
    text: str
    memory_id: str
    # The source's hit columns: memory_id (or event_id), kind ('event' for an event), session_id, stored
    # date, importance, content, then for events seq, role, type, tool_name and tool_args (the order of
    # ``obsmem.retrieval.results.Hit.from_row``); turned into a hit only if it is returned.
    row: tuple
    # Where the chunk sits, for neighbour smoothing: its memory's row, its position among the memory's
    # chunk_count chunks, and the rows of the observations before and after it in its session.
    memory_row: int = 0
    position: int = 0
    chunk_count: int = 1
    previous_row: int | None = None
    next_row: int | None = None


class IndexReader(Protocol):
    """The reads one search makes, all from one consistent snapshot of one project's index.

    Chunks are named by their label (the vector label, never reused); memories by their row. Scores are
    higher-is-better. Nothing here writes.
    """

    @property
    def source(self) -> str:
        """A name for the store behind the snapshot, stable while it lives (a key for caches)."""
        ...

    def state(self) -> IndexState:
        """The index state row (signature, dimensions, version)."""
        ...

    def source_count(self, kind: str | None = None) -> int:
        """Memories and events that exist, indexed or not (``kind``: ``memories`` or ``events`` alone)."""
        ...

    def indexed_count(self, kind: str | None = None) -> int:
        """Current memories and events represented by at least one indexed chunk (``kind``: one alone)."""
        ...

    def has_pending(self, kind: str | None = None) -> bool:
        """Whether any memory or event waits to be (re)indexed: search then serves a partial index
        (``kind``: ``memories`` or ``events`` alone)."""
        ...

    def stale_chunks(self, cap: int) -> int:
        """Indexed chunks whose memory has changed since it was indexed, counted up to ``cap``."""
        ...

    def keyword_terms(self, words: list[str]) -> list[tuple[str, list[str]]]:
        """``(word, the tokens the keyword index holds it as)`` for each word it can match, in order.

        A word the index cannot match (it tokenizes to nothing) is left out; the tokens may be empty when
        the index matches words without tokenizing them (substring indexes)."""
        ...

    def counts_postings(self) -> bool:
        """Whether :meth:`term_postings` counts anything (False: every term's work is unbounded anyway)."""
        ...

    def term_postings(self, term: str, bound: int) -> tuple[int, int]:
        """``(chunks holding term counted newest first up to bound + 1, the oldest label counted)``."""
        ...

    def term_postings_many(self, terms: list[str], bound: int) -> list[tuple[int, int]]:
        """:meth:`term_postings` of each of ``terms``, in order (a backend with round trips makes it one)."""
        ...

    def term_postings_oldest(self, term: str, bound: int) -> tuple[int, int]:
        """``(chunks holding term counted oldest first up to bound + 1, the newest label counted)``: the
        other end of the index from :meth:`term_postings`."""
        ...

    def keyword_candidates(
        self,
        terms: list[str],
        k: int,
        where: Filter | None = None,
        *,
        label_range: tuple[int, int] | None = None,
        recent: int | None = None,
    ) -> list[tuple[int, float]]:
        """Up to ``k`` chunks matching any of ``terms``, best first by the weighted BM25 score.

        With a filter, only chunks inside it (filter first, then rank); ``label_range`` bounds the labels
        that can pass it. ``recent`` (open searches only) scores just the ``recent`` newest chunks that
        match. Ties by label."""
        ...

    def validate(self, labels: Collection[int], where: Filter) -> dict[int, ValidChunk]:
        """The chunks of ``labels`` that still describe their current memory (same memory, same content)
        and pass ``where``."""
        ...

    def chunk_positions(self, memory_rows: Collection[int]) -> Iterator[tuple[int, int, int]]:
        """``(memory_row, position, label)`` of every chunk of the given memories."""
        ...

    def embeddings(self, labels: Collection[int]) -> Iterator[tuple[int, np.ndarray]]:
        """The stored embedding of each of ``labels`` that has one."""
        ...


def rank_function(weights: Mapping[Any, float]) -> str:
    """``bm25(1.0, 0.5, 0.2, 2.0)``: FTS5's per-query rank setting, one weight per column in order."""
    return "bm25(" + ", ".join(repr(float(weights[column])) for column in COLUMNS) + ")"


def fts_string(text: str) -> str:
    """One FTS5 string: double-quoted, inner double quotes doubled (so no user text is FTS5 syntax)."""
    return '"' + text.replace('"', '""') + '"'


def fts_match(terms: list[str]) -> str:
    """The FTS5 query matching any of ``terms``: each one quoted, joined with OR."""
    return " OR ".join(fts_string(term) for term in terms)


class Fts5Keywords:
    """How the keyword list is queried in FTS5, fixed by the settings: the tokenizer and the rank weights."""

    def __init__(self, tokenizer: str, column_weights: Mapping[Any, float]) -> None:
        parts = tokenizer.split()
        self.tokenizer_name, self.tokenizer_args = parts[0], parts[1:]
        self.trigram = parts[0] == "trigram"
        self.rank = rank_function(column_weights)


def _json_list(values: Collection[int]) -> str:
    """``[1,2,3]``: the argument of ``json_each`` (faster than json.dumps for plain integers)."""
    return "[" + ",".join(map(str, sorted(values))) + "]"


# Where every chunk of the given memory rows sits: the (memory_row, position) index alone answers it.
_POSITIONS = (
    "SELECT c.memory_row, c.position, c.id FROM json_each(?) AS wanted"
    " JOIN semantic_chunks AS c ON c.memory_row = wanted.value"
)
# The given chunks (by label) with what validation needs, where each sits (for neighbour smoothing),
# whether its source has changed since it was indexed and the text it was indexed from, then the hit
# columns of its memory (positive row) or event (negative row). A source that is gone has NULLs.
_VALIDATION = (
    "SELECT c.id, c.text, s.memory_id, s.content_hash, c.memory_row, c.position, s.chunk_count,"
    " x.previous_row, x.next_row, p.memory_row IS NOT NULL,"
    f" CASE WHEN c.memory_row > 0 THEN m.content ELSE {event_text('e')} END,"
    " coalesce(m.memory_id, obsmem_event_id(e.session_id, e.seq)), coalesce(m.kind, 'event'),"
    " coalesce(m.session_id, e.session_id),"
    f" coalesce(m.date, {event_date('e')}), m.importance, coalesce(m.content, e.content),"
    " e.seq, e.role, e.type, e.tool_name, e.tool_args"
    " FROM json_each(?) AS wanted JOIN semantic_chunks AS c ON c.id = wanted.value"
    " JOIN semantic_sources AS s ON s.memory_row = c.memory_row"
    " LEFT JOIN memories AS m ON c.memory_row > 0 AND m.id = c.memory_row"
    " LEFT JOIN events AS e ON c.memory_row < 0 AND e.id = -c.memory_row"
    f" LEFT JOIN {CONTEXT_TABLE} AS x ON x.memory_row = c.memory_row"
    " LEFT JOIN semantic_pending AS p ON p.memory_row = c.memory_row"
)
_EMBEDDINGS = (
    "SELECT v.chunk, v.embedding FROM json_each(?) AS wanted JOIN semantic_vectors AS v ON v.chunk = wanted.value"
)
_STALE = (
    "SELECT count(*) FROM (SELECT 1 FROM semantic_pending AS p"
    " JOIN semantic_chunks AS c ON c.memory_row = p.memory_row WHERE p.memory_row > ? LIMIT ?)"
)
_POSTINGS = (
    f"SELECT count(*), min(id) FROM (SELECT rowid AS id FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH ?"
    " ORDER BY rowid DESC LIMIT ?)"
)
_POSTINGS_OLDEST = (
    f"SELECT count(*), max(id) FROM (SELECT rowid AS id FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH ?"
    " ORDER BY rowid LIMIT ?)"
)
# FTS5's rank is bm25() under the weights of ``rank MATCH``: negative, lower is better.
_RECENT_MATCHES = (
    f"SELECT id, score FROM (SELECT rowid AS id, rank AS score FROM {FTS_TABLE}"
    f" WHERE {FTS_TABLE} MATCH ? AND rank MATCH ? ORDER BY rowid DESC LIMIT ?)"
    " ORDER BY score, id LIMIT ?"
)
_ALL_MATCHES = (
    f"SELECT rowid, rank FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH ? AND rank MATCH ? ORDER BY rank, rowid LIMIT ?"
)


class SqliteIndexReader:
    """:class:`IndexReader` over one apsw connection inside a read transaction (the caller's snapshot)."""

    def __init__(self, conn: apsw.Connection, keywords: Fts5Keywords, *, first_row: int = -(2**63)) -> None:
        """``first_row``: pending markers at or below it are not indexed (events, when they are not)."""
        self.conn = conn
        self.keywords = keywords
        self.first_row = first_row
        # The sources counted when no kind is asked for: memories alone unless events are indexed.
        self.default_kind = MEMORIES if first_row >= 0 else None

    @property
    def source(self) -> str:
        return self.conn.filename

    # -- readiness ------------------------------------------------------------------------------

    def state(self) -> IndexState:
        return IndexState.read(self.conn)

    def source_count(self, kind: str | None = None) -> int:
        return stores.source_count(self.conn, kind or self.default_kind)

    def indexed_count(self, kind: str | None = None) -> int:
        return stores.indexed_count(self.conn, kind or self.default_kind)

    def has_pending(self, kind: str | None = None) -> bool:
        kind = kind or self.default_kind
        # Memories are marked under positive rows, events under negative ones (below first_row: not indexed).
        sql = "SELECT EXISTS (SELECT 1 FROM semantic_pending WHERE memory_row > ?"
        sql += {MEMORIES: " AND memory_row > 0)", EVENTS: " AND memory_row < 0)"}.get(kind or "", ")")
        if self._one(sql, (self.first_row,))[0]:
            return True
        # New events wait unmarked for the indexer's next batch (when events are indexed at all).
        return kind != MEMORIES and self.default_kind is None and bool(self._one(UNMARKED_EVENTS, ())[0])

    def stale_chunks(self, cap: int) -> int:
        return int(self._one(_STALE, (self.first_row, cap))[0])

    def _one(self, sql: str, params: tuple[object, ...]) -> tuple[Any, ...]:
        """The single row an aggregate query returns."""
        row = self.conn.execute(sql, params).fetchone()
        assert row is not None  # an aggregate without GROUP BY always returns one row
        return row

    # -- keyword candidates ---------------------------------------------------------------------

    def keyword_terms(self, words: list[str]) -> list[tuple[str, list[str]]]:
        keywords = self.keywords
        if keywords.trigram:  # the trigram tokenizer matches any substring of 3 or more characters
            return [(word, []) for word in words if len(word) >= 3]
        tokenize = self.conn.fts5_tokenizer(keywords.tokenizer_name, keywords.tokenizer_args)
        found = []
        for word in words:
            tokens = [token for _, _, token, *_ in tokenize(word.encode("utf-8"), apsw.FTS5_TOKENIZE_QUERY, None)]
            if tokens:
                found.append((word, tokens))
        return found

    def counts_postings(self) -> bool:
        # Trigram posting lists are per trigram, not per term: a term's count would mean nothing.
        return not self.keywords.trigram

    def term_postings(self, term: str, bound: int) -> tuple[int, int]:
        count, oldest = self._one(_POSTINGS, (fts_string(term), bound + 1))
        return int(count), int(oldest or 0)

    def term_postings_many(self, terms: list[str], bound: int) -> list[tuple[int, int]]:
        return [self.term_postings(term, bound) for term in terms]  # in-process: no exchange to save

    def term_postings_oldest(self, term: str, bound: int) -> tuple[int, int]:
        count, newest = self._one(_POSTINGS_OLDEST, (fts_string(term), bound + 1))
        return int(count), int(newest or 0)

    def keyword_candidates(
        self,
        terms: list[str],
        k: int,
        where: Filter | None = None,
        *,
        label_range: tuple[int, int] | None = None,
        recent: int | None = None,
    ) -> list[tuple[int, float]]:
        expression = fts_match(terms)
        rank = self.keywords.rank
        if where is None or where.is_open:
            if recent is not None:
                rows = self.conn.execute(_RECENT_MATCHES, (expression, rank, recent, k))
            else:
                rows = self.conn.execute(_ALL_MATCHES, (expression, rank, k))
        else:
            rows = self._filtered_matches(expression, k, where, label_range)
        return [(int(label), -float(score)) for label, score in rows]

    def _filtered_matches(
        self, expression: str, k: int, where: Filter, label_range: tuple[int, int] | None
    ) -> apsw.Cursor:
        """The match in its own materialised CTE, the filter joined afterwards: joining ``MATCH`` with the
        filters directly can invert the plan (milliseconds become seconds)."""
        clauses: list[str] = []
        params: list[object] = [expression, self.keywords.rank]
        if where.lower is not None:
            clauses.append("c.date >= ?")
            params.append(where.lower)
        if where.upper is not None:
            clauses.append("c.date <= ?")
            params.append(where.upper)
        if where.session_id is not None:
            clauses.append("c.session_id = ?")
            params.append(where.session_id)
        if where.kind is not None:
            clauses.append("c.memory_row < 0" if where.kind == EVENTS else "c.memory_row > 0")
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
        params.append(k)
        return self.conn.execute(sql, params)

    # -- validation, neighbours, vectors --------------------------------------------------------

    def validate(self, labels: Collection[int], where: Filter) -> dict[int, ValidChunk]:
        if not labels:
            return {}
        # One statement for any number of labels (a JSON array), so it is prepared once and cached.
        return _checked(self.conn.execute(_VALIDATION, (_json_list(labels),)), where)

    def chunk_positions(self, memory_rows: Collection[int]) -> Iterator[tuple[int, int, int]]:
        return iter(self.conn.execute(_POSITIONS, (_json_list(memory_rows),)))

    def embeddings(self, labels: Collection[int]) -> Iterator[tuple[int, np.ndarray]]:
        for label, blob in self.conn.execute(_EMBEDDINGS, (_json_list(labels),)):
            yield int(label), np.frombuffer(blob, dtype=np.float32)


def _checked(rows: apsw.Cursor, where: Filter) -> dict[int, ValidChunk]:
    """The rows of :data:`_VALIDATION` whose chunk still describes the current memory and pass the filter.

    A memory changed since its chunks were indexed has a ``semantic_pending`` row (the memories
    triggers write it in the same transaction as the change, on the columns checked here), so only
    those memories' content is hashed."""
    found: dict[int, ValidChunk] = {}
    hashes: dict[str, str] = {}
    lower, upper, session, kind = where.lower, where.upper, where.session_id, where.kind
    for label, text, source_id, source_hash, memory_row, position, count, previous, following, pending, *rest in rows:
        indexed_text, *row = rest
        memory_id, _, session_id, date = row[:4]
        if memory_id != source_id:
            continue  # the row id now belongs to another memory (or the source is gone)
        if kind is not None and (memory_row < 0) != (kind == EVENTS):
            continue
        if pending:
            digest = hashes.get(memory_id)
            if digest is None:
                digest = hashes[memory_id] = hashlib.sha256(indexed_text.encode("utf-8")).hexdigest()
            if digest != source_hash:
                continue  # edited since it was indexed
        if (lower is not None and date < lower) or (upper is not None and date > upper):
            continue
        if session is not None and session_id != session:
            continue
        found[label] = ValidChunk(label, text, memory_id, tuple(row), memory_row, position, count, previous, following)
    return found
