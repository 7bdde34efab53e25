"""A brute-force reference for hybrid search, computed from the canonical memories alone.

It re-chunks every current memory, embeds each chunk with the loopback server's function, ranks
chunks by exact cosine similarity and by BM25 over a fresh in-memory FTS5 table of exactly those chunks,
fuses with RRF and collapses to memories. Chunk labels are looked up by chunk key in the real index (a
missing chunk fails the lookup), so ties break the same way in both.
"""

from __future__ import annotations

from typing import Any

import apsw
import numpy as np
from loopback_models import embed
from obsmem.indexer.chunker import ChunkSettings, chunk_text
from obsmem.indexer.stores import create_fts
from obsmem.indexer.vectors import Filter
from obsmem.retrieval.bm25 import Bm25List
from obsmem.retrieval.fusion import reciprocal_rank_fusion
from obsmem.retrieval.ranked import RankedList

from obsmem.dates import parse_window
from obsmem.settings_semantic import SemanticSettings
from obsmem.storage.schema import m0003_semantic


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
    chunking = ChunkSettings(settings.chunk_bytes, settings.overlap_bytes, settings.max_lines)
    window = parse_window(after, before)
    where = Filter(window.lower, window.upper, session_id)
    memories = conn.execute("SELECT memory_id, content, date, session_id FROM memories").fetchall()
    chunks: list[tuple[int, str, str, str, str]] = []  # label, memory_id, text, date, session
    for memory_id, content, date, session in memories:
        for chunk in chunk_text(memory_id, content, chunking):
            row = conn.execute("SELECT id FROM semantic_chunks WHERE chunk_key = ?", (chunk.key,)).fetchone()
            assert row is not None, "a chunk of a current memory is missing from the index"
            chunks.append((row[0], memory_id, chunk.text, date, session))
    assert len(chunks) == conn.execute("SELECT count(*) FROM semantic_chunks").fetchone()[0], "stale chunks left"

    def inside(date: str, session: str) -> bool:
        return (
            (where.lower is None or date >= where.lower)
            and (where.upper is None or date <= where.upper)
            and (where.session_id is None or session == where.session_id)
        )

    k = settings.fusion.candidates_per_list
    # Vector list: exact cosine over the chunks inside the filter; ties by label.
    q = np.asarray(embed(query), dtype=np.float32)
    q /= np.linalg.norm(q)
    scored = []
    for label, _, text, date, session in chunks:
        if inside(date, session):
            v = np.asarray(embed(text), dtype=np.float32)
            v /= np.linalg.norm(v)
            scored.append((-float(v @ q), label))
    scored.sort()
    vector = RankedList("vector", [(label, -s) for s, label in scored[:k]])
    # BM25 list over a fresh table holding exactly the current chunks.
    memory_db = apsw.Connection(":memory:")
    memory_db.execute(m0003_semantic.SQL.split("CREATE TABLE semantic_pending")[0])
    memory_db.execute(
        "CREATE TABLE memories(id INTEGER PRIMARY KEY);"
        "CREATE TABLE semantic_chunks(id INTEGER PRIMARY KEY, text TEXT, date TEXT, session_id TEXT);"
    )
    create_fts(memory_db, settings.bm25.tokenizer)
    for label, _, text, date, session in chunks:
        memory_db.execute("INSERT INTO semantic_chunks VALUES (?, ?, ?, ?)", (label, text, date, session))
        memory_db.execute("INSERT INTO semantic_fts(rowid, text) VALUES (?, ?)", (label, text))
    bm25 = Bm25List(settings.bm25)
    expression = bm25.match_expression(memory_db, query)
    keyword = RankedList("bm25")
    if expression is not None:
        rows = memory_db.execute(
            "SELECT f.rowid, f.rank, c.date, c.session_id FROM semantic_fts AS f"
            " JOIN semantic_chunks AS c ON c.id = f.rowid WHERE semantic_fts MATCH ? ORDER BY f.rank, f.rowid",
            (expression,),
        ).fetchall()
        keyword.items = [(label, -rank) for label, rank, date, session in rows if inside(date, session)][:k]
    fused = reciprocal_rank_fusion([keyword, vector], settings.fusion.weights, settings.fusion.rrf_k)
    owner = {label: memory_id for label, memory_id, *_ in chunks}
    result: list[str] = []
    for label, _ in fused[: settings.fusion.fused_candidates]:
        if owner[label] not in result:
            result.append(owner[label])
    return result[:limit]


def index_matches_memories(conn: apsw.Connection, settings: SemanticSettings) -> dict[str, Any]:
    """Facts a test asserts after any sequence of writes, deletes and crashes."""
    chunking = ChunkSettings(settings.chunk_bytes, settings.overlap_bytes, settings.max_lines)
    expected = set()
    for memory_id, content in conn.execute("SELECT memory_id, content FROM memories"):
        expected |= {c.key for c in chunk_text(memory_id, content, chunking)}
    stored = {row[0] for row in conn.execute("SELECT chunk_key FROM semantic_chunks")}
    vectors = conn.execute("SELECT count(*) FROM semantic_vectors").fetchone()[0]
    conn.execute("INSERT INTO semantic_fts(semantic_fts) VALUES ('integrity-check')")
    fts_rows = conn.execute("SELECT count(*) FROM semantic_fts").fetchone()[0]
    return {
        "missing": len(expected - stored),
        "stale": len(stored - expected),
        "vectors_match": vectors == len(stored),
        "fts_match": fts_rows == len(stored),
        "pending": conn.execute("SELECT count(*) FROM semantic_pending").fetchone()[0],
    }
