"""A brute-force reference for hybrid search, computed from the canonical memories alone.

It re-chunks every current memory, builds each chunk's contextual keyword document from scratch (the
neighbouring observations of its session in date order), embeds each chunk with the loopback server's
function, ranks chunks by exact cosine similarity and by BM25 over a fresh in-memory FTS5 table of
exactly those documents, fuses and smooths with the configured method and collapses to memories. Chunk
labels are looked up by chunk key in the real index (a missing chunk fails the lookup), so ties break
the same way in both. The index, maintained incrementally through inserts, edits, deletes and crashes,
must give the same results as this from-scratch computation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import apsw
import numpy as np

from obsmem.dates import parse_window
from obsmem.indexer.chunker import ChunkSettings, chunk_text
from obsmem.indexer.keywords import Context, KeywordDocuments, date_words, head, tail
from obsmem.indexer.reader import Fts5Keywords, SqliteIndexReader, fts_match, rank_function
from obsmem.indexer.vectors import Filter
from obsmem.retrieval.bm25 import ENGLISH_STOPWORDS, Bm25List, bm25_ceiling, query_terms
from obsmem.retrieval.common_words import common_words, half_weighted, without_words
from obsmem.retrieval.fusion import fuser, neighbour_smoothing, session_pull
from obsmem.retrieval.names import CALENDAR_WORDS, named_first
from obsmem.retrieval.ranked import RankedList
from obsmem.retrieval.supersession import asks_about_now, latest_first, names_replacements, replaced_values
from obsmem.settings.semantic import Bm25Settings, SemanticSettings
from support.model_server import embed


@dataclass
class Doc:
    label: int
    memory_id: str
    body: str
    previous: str
    next: str
    date: str
    stored_date: str
    session: str


def unit(text: str) -> np.ndarray:
    vector = np.asarray(embed(text), dtype=np.float32)
    return (vector / np.linalg.norm(vector.astype(np.float64))).astype(np.float32)


def keyword_documents(conn: apsw.Connection, settings: SemanticSettings) -> tuple[list[Doc], dict[int, list[int]]]:
    """Every current chunk's keyword document and each chunk's neighbours, from the memories alone."""
    chunking = ChunkSettings(settings.chunk_bytes, settings.overlap_bytes, settings.max_lines)
    limit = settings.bm25.context_characters
    memories = conn.execute(
        "SELECT id, memory_id, kind, session_id, date, content FROM memories ORDER BY session_id, date, id"
    ).fetchall()
    observations = [m for m in memories if m[2] == "observation"]
    place = {m[0]: i for i, m in enumerate(observations)}
    docs: list[Doc] = []
    labels_of: dict[int, list[int]] = {}
    for row, memory_id, kind, session, date, content in memories:
        before = after = None
        if kind == "observation":
            position = place[row]
            if position > 0 and observations[position - 1][3] == session:
                before = observations[position - 1]
            if position + 1 < len(observations) and observations[position + 1][3] == session:
                after = observations[position + 1]
        chunks = chunk_text(memory_id, content, chunking)
        labels_of[row] = []
        for i, chunk in enumerate(chunks):
            found = conn.execute("SELECT id FROM semantic_chunks WHERE chunk_key = ?", (chunk.key,)).fetchone()
            assert found is not None, "a chunk of a current memory is missing from the index"
            labels_of[row].append(found[0])
            docs.append(
                Doc(
                    found[0],
                    memory_id,
                    chunk.text,
                    tail(before[5], limit) if before is not None and i == 0 and limit else "",
                    head(after[5], limit) if after is not None and i == len(chunks) - 1 and limit else "",
                    date_words(date),
                    date,
                    session,
                )
            )
    assert len(docs) == conn.execute("SELECT count(*) FROM semantic_chunks").fetchone()[0], "stale chunks left"
    neighbours: dict[int, list[int]] = {}

    def link(one: int, other: int) -> None:
        neighbours.setdefault(one, []).append(other)
        neighbours.setdefault(other, []).append(one)

    for labels in labels_of.values():
        for one, other in zip(labels, labels[1:], strict=False):
            link(one, other)
    for first, second in zip(observations, observations[1:], strict=False):
        if first[3] == second[3]:
            link(labels_of[first[0]][-1], labels_of[second[0]][0])
    return docs, neighbours


def scratch_keyword_table(tokenizer: str, context_characters: int = 300) -> apsw.Connection:
    """An in-memory database with empty keyword tables (and the few tables their creation reads), for
    running the keyword list over documents a test writes itself."""
    conn = apsw.Connection(":memory:")
    conn.execute(
        "CREATE TABLE semantic_state(id INTEGER PRIMARY KEY, fts_tokenizer TEXT, updated_at TEXT);"
        "INSERT INTO semantic_state(id) VALUES (1);"
        "CREATE TABLE memories(id INTEGER PRIMARY KEY, session_id TEXT, date TEXT, kind TEXT, content TEXT);"
        "CREATE TABLE events(id INTEGER PRIMARY KEY, session_id TEXT, seq INTEGER, created_at TEXT, content TEXT,"
        " tool_name TEXT, tool_args TEXT);"
        "CREATE TABLE semantic_sources(memory_row INTEGER PRIMARY KEY);"
        "CREATE TABLE semantic_chunks(id INTEGER PRIMARY KEY, memory_row INTEGER, position INTEGER, text TEXT,"
        " date TEXT, session_id TEXT);"
    )
    KeywordDocuments(tokenizer, context_characters).create(conn)
    return conn


def keyword_reader(conn: apsw.Connection, bm25: Bm25Settings) -> SqliteIndexReader:
    """The index's read contract over ``conn`` (a scratch keyword table), its keyword list queried as ``bm25``
    says."""
    return SqliteIndexReader(conn, Fts5Keywords(bm25.tokenizer, bm25.column_weights))


def reference_search(
    conn: apsw.Connection,
    settings: SemanticSettings,
    query: str,
    *,
    after: str | None = None,
    before: str | None = None,
    session_id: str | None = None,
    limit: int = 20,
) -> list[str]:
    window = parse_window(after, before)
    where = Filter(window.lower, window.upper, session_id)
    docs, neighbours = keyword_documents(conn, settings)

    def inside(doc: Doc) -> bool:
        return (
            (where.lower is None or doc.stored_date >= where.lower)
            and (where.upper is None or doc.stored_date <= where.upper)
            and (where.session_id is None or doc.session == where.session_id)
        )

    k = settings.fusion.candidates_per_list
    fusion = settings.fusion
    window_docs = [doc for doc in docs if inside(doc)]
    memory_db = scratch_keyword_table(settings.bm25.tokenizer, settings.bm25.context_characters)
    for doc in docs:
        memory_db.execute(
            "INSERT INTO semantic_fts(rowid, body, previous, next, date) VALUES (?, ?, ?, ?, ?)",
            (doc.label, doc.body, doc.previous, doc.next, doc.date),
        )
    # Vector list: exact cosine over the chunks inside the filter; ties by label. The query vector is
    # half the query without the words a common_word_share of all chunks hold, counted in the fresh table.
    q = unit(query)
    without = reference_without_common_words(memory_db, settings, query, len(docs))
    if without is not None:
        q = half_weighted(q, unit(without))
    cosine = {}
    if window_docs:
        matrix = np.stack([unit(doc.body) for doc in window_docs])
        cosine = {doc.label: float(score) for doc, score in zip(window_docs, matrix @ q, strict=True)}
    ordered = sorted(cosine.items(), key=lambda item: (-item[1], item[0]))
    vector = RankedList("vector", ordered[:k])
    # BM25 list over the fresh table holding exactly the current keyword documents.
    terms, _ = Bm25List(settings.bm25).match(keyword_reader(memory_db, settings.bm25), query)
    keyword = RankedList("bm25")
    by_label = {doc.label: doc for doc in docs}
    if terms:
        rows = memory_db.execute(
            "SELECT rowid, rank FROM semantic_fts WHERE semantic_fts MATCH ? AND rank MATCH ? ORDER BY rank, rowid",
            (fts_match(terms), rank_function(settings.bm25.column_weights)),
        ).fetchall()
        keyword.items = [(label, -rank) for label, rank in rows if inside(by_label[label])][:k]
        # The query's ceiling from FTS5's own statistics: every chunk of the table, each term's matches.
        postings = [postings_of(memory_db, term) for term in terms]
        keyword.ceiling = bm25_ceiling(postings, len(docs))
    lists = [ranked for ranked, weight in ((keyword, "bm25"), (vector, "vector")) if fusion.weights[weight] > 0]
    if len(lists) == 1:
        fused = lists[0].items
    else:
        union = {label for ranked in lists for label in ranked.labels}
        fuse = fuser(fusion.method, rrf_k=fusion.rrf_k, full_coverage=fusion.bm25_full_coverage)
        fused = fuse(lists, fusion.weights, {x: cosine[x] for x in union})
        supersedes = settings.supersession.enabled and (not settings.supersession.present_only or asks_about_now(query))
        if not supersedes:  # a question about the present asks across sessions: no session evidence
            sessions = {label: by_label[label].session for label, _ in fused}
            fused = session_pull(fused, sessions, fusion.session_weight)
        allowed = {label: [o for o in near if inside(by_label[o])] for label, near in neighbours.items()}
        fused = neighbour_smoothing(fused, allowed, fusion.neighbour_weight)
        if fusion.named_first:
            fused = named_first(query, fused, lambda label: by_label[label].body)
        if settings.supersession.enabled:
            config = settings.supersession
            head = [by_label[label] for label, _ in fused[: config.depth]]
            named = names_replacements(query, config)
            fused = latest_first(
                query,
                fused,
                texts={doc.label: doc.body for doc in head},
                dates={doc.label: doc.stored_date for doc in head},
                sessions={doc.label: doc.session for doc in head},
                embeddings={doc.label: unit(doc.body) for doc in head},
                changes={doc.label: replaced_values(doc.body) for doc in head} if named else {},
                config=config,
            )
    result: list[str] = []
    for label, _ in fused[: fusion.fused_candidates]:
        if by_label[label].memory_id not in result:
            result.append(by_label[label].memory_id)
    return result[:limit]


def reference_without_common_words(
    memory_db: apsw.Connection, settings: SemanticSettings, query: str, chunks: int
) -> str | None:
    """The query less the words a ``common_word_share`` of all ``chunks`` keyword documents hold, counted
    exactly in the fresh table: none with the trigram tokenizer (it keeps no word counts); never a word held
    as a stopword or calendar word. (Past ``max_postings`` the product estimates on SQLite what this
    counts: compare the two only within it.)"""
    share = settings.fusion.common_word_share
    if settings.bm25.tokenizer.split()[0] == "trigram":
        return None
    reader = keyword_reader(memory_db, settings.bm25)
    stopwords = frozenset() if settings.bm25.stopwords == "none" else ENGLISH_STOPWORDS
    terms = reader.keyword_terms(query_terms(query, stopwords))
    stop_tokens = {
        token for _, tokens in reader.keyword_terms(sorted(ENGLISH_STOPWORDS | CALENDAR_WORDS)) for token in tokens
    }
    merged = {word for word, tokens in terms if stop_tokens.intersection(tokens)}
    counts = {word: postings_of(memory_db, word) for word, _ in terms}
    return without_words(query, common_words(counts, chunks, share, merged))


def postings_of(memory_db: apsw.Connection, term: str) -> int:
    """How many keyword documents of the fresh table match ``term``."""
    row = memory_db.execute("SELECT count(*) FROM semantic_fts WHERE semantic_fts MATCH ?", (fts_match([term]),))
    return int(row.fetchone()[0])


# What index_matches_memories says of an index in step with its memories.
IN_STEP: dict[str, Any] = {
    "missing": 0,
    "stale": 0,
    "vectors_match": True,
    "fts_match": True,
    "pending": 0,
    "contexts_wrong": 0,
}


def index_matches_memories(conn: apsw.Connection, settings: SemanticSettings) -> dict[str, Any]:
    """Facts a test asserts after any sequence of writes, deletes and crashes."""
    chunking = ChunkSettings(settings.chunk_bytes, settings.overlap_bytes, settings.max_lines)
    expected = set()
    for memory_id, content in conn.execute("SELECT memory_id, content FROM memories"):
        expected |= {c.key for c in chunk_text(memory_id, content, chunking)}
    stored = {row[0] for row in conn.execute("SELECT chunk_key FROM semantic_chunks")}
    vectors = conn.execute("SELECT count(*) FROM semantic_vectors").fetchone()[0]
    fts_rows = conn.execute("SELECT count(*) FROM semantic_fts").fetchone()[0]
    return {
        "missing": len(expected - stored),
        "stale": len(stored - expected),
        "vectors_match": vectors == len(stored),
        "fts_match": fts_rows == len(stored),
        # Memory markers (events are marked under negated rows and indexed only when the setting says so).
        "pending": conn.execute("SELECT count(*) FROM semantic_pending WHERE memory_row > 0").fetchone()[0],
        "contexts_wrong": len(contexts_wrong(conn, settings)),
    }


def contexts_wrong(conn: apsw.Connection, settings: SemanticSettings) -> list[int]:
    """Indexed memories whose recorded keyword context differs from a from-scratch computation."""
    limit = settings.bm25.context_characters
    memories = conn.execute("SELECT id, kind, session_id, date, content FROM memories ORDER BY session_id, date, id")
    rows = memories.fetchall()
    observations = [m for m in rows if m[1] == "observation"]
    expected: dict[int, Context] = {}
    for row, kind, _, date, _ in rows:
        if kind != "observation":
            expected[row] = Context(None, None, "", "", date_words(date))
    for i, (row, _, session, date, _) in enumerate(observations):
        before = observations[i - 1] if i > 0 and observations[i - 1][2] == session else None
        after = observations[i + 1] if i + 1 < len(observations) and observations[i + 1][2] == session else None
        expected[row] = Context(
            before[0] if before else None,
            after[0] if after else None,
            tail(before[4], limit) if before and limit else "",
            head(after[4], limit) if after and limit else "",
            date_words(date),
        )
    wrong = []
    recorded = conn.execute("SELECT memory_row, previous_row, next_row, digest FROM semantic_context").fetchall()
    for row, previous_row, next_row, digest in recorded:
        context = expected.get(row)
        if context is None or (context.previous_row, context.next_row, context.digest) != (
            previous_row,
            next_row,
            bytes(digest),
        ):
            wrong.append(row)
    indexed = conn.execute("SELECT count(*) FROM semantic_sources").fetchone()[0]
    return wrong + [-1] * abs(indexed - len(recorded))
