"""The derived stores in SQLite: chunk rows, their keyword rows and their embeddings.

Two kinds of source are indexed: memories (observations and reflections) under their row id, and
conversation events under their negated row id (``-events.id``; see migration 6), so one marker table,
one source table and one chunk table hold both without a collision (:mod:`obsmem.indexer.sources`).

A chunk's row id is its vector label (AUTOINCREMENT, so a label is never reused) and its keyword row's
rowid in ``semantic_fts`` (contextual keyword documents, see :mod:`obsmem.indexer.keywords`, which
writes them). Embeddings are stored as float32 blobs checked by sqlite-vec (``vec_f32``), so the graph
index can always be rebuilt from them without calling the model.
"""

from __future__ import annotations

import apsw

from obsmem.indexer.keywords import KeywordDocuments
from obsmem.indexer.sources import MARK_ALL_EVENTS_AGAIN
from obsmem.indexer.state import bump_version, update_state


def reset_derived(conn: apsw.Connection, signature: str, keywords: KeywordDocuments) -> None:
    """Drop every derived row and queue every memory and event again (one transaction; canonical rows
    untouched)."""
    conn.execute("DELETE FROM semantic_vectors")
    conn.execute("DELETE FROM semantic_chunks")
    conn.execute("DELETE FROM semantic_sources")
    conn.execute("DELETE FROM semantic_removed")
    conn.execute(
        "INSERT INTO semantic_pending(memory_row) SELECT id FROM memories WHERE true"
        " ON CONFLICT(memory_row) DO UPDATE SET change = change + 1"
    )
    conn.execute(MARK_ALL_EVENTS_AGAIN)
    keywords.create(conn)
    _, version = bump_version(conn)
    update_state(
        conn,
        signature=signature,
        dimensions=None,
        dirty=0,
        hnsw_file=None,
        hnsw_bytes=None,
        hnsw_checksum=None,
        hnsw_version=None,
        hnsw_count=None,
        removed_floor=version,
    )


def remove_chunks(conn: apsw.Connection, memory_row: int, version: int, keywords: KeywordDocuments) -> list[int]:
    """Delete a memory's chunks, their keyword rows and embeddings; returns the removed labels."""
    labels = [row[0] for row in conn.execute("SELECT id FROM semantic_chunks WHERE memory_row = ?", (memory_row,))]
    keywords.remove(conn, memory_row, labels)
    for label in labels:
        conn.execute("DELETE FROM semantic_vectors WHERE chunk = ?", (label,))
        conn.execute(
            "INSERT INTO semantic_removed(label, version) VALUES (?, ?)"
            " ON CONFLICT(label) DO UPDATE SET version = excluded.version",
            (label, version),
        )
    conn.execute("DELETE FROM semantic_chunks WHERE memory_row = ?", (memory_row,))
    conn.execute("DELETE FROM semantic_sources WHERE memory_row = ?", (memory_row,))
    return labels


def insert_chunk_row(
    conn: apsw.Connection, *, key: str, memory_row: int, position: int, date: str, session_id: str, text: str
) -> int:
    """Insert a chunk's row (its embedding comes after, with :func:`insert_vectors`); returns its label."""
    return int(
        conn.execute(
            "INSERT INTO semantic_chunks(chunk_key, memory_row, position, date, session_id, text)"
            " VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
            (key, memory_row, position, date, session_id, text),
        ).fetchone()[0]
    )


def insert_vectors(conn: apsw.Connection, vectors: list[tuple[int, bytes]]) -> None:
    """Store embeddings (label, float32 bytes) of chunks inserted in this transaction."""
    conn.executemany("INSERT INTO semantic_vectors(chunk, embedding) VALUES (?, vec_f32(?))", vectors)


def stored_embeddings(conn: apsw.Connection, keys: list[str]) -> dict[str, bytes]:
    """Embeddings already stored for these chunk keys (re-chunking unchanged text costs no model call)."""
    found: dict[str, bytes] = {}
    for start in range(0, len(keys), 500):
        part = keys[start : start + 500]
        marks = ",".join("?" * len(part))
        for key, blob in conn.execute(
            "SELECT c.chunk_key, v.embedding FROM semantic_chunks AS c JOIN semantic_vectors AS v ON v.chunk = c.id"
            f" WHERE c.chunk_key IN ({marks})",
            part,
        ):
            found[key] = blob
    return found


_SOURCE_COUNTS = {"memories": "SELECT count(*) FROM memories", "events": "SELECT count(*) FROM events"}
_INDEXED_COUNTS = {
    "memories": "SELECT count(*) FROM semantic_sources AS s JOIN memories AS m"
    " ON m.id = s.memory_row AND m.memory_id = s.memory_id WHERE s.memory_row > 0 AND s.chunk_count > 0",
    # An event's id is derived on read (a SHA-256), so it is compared only where the source may be stale: an
    # event up to the marker watermark that is not pending is the one indexed, since every change to such a
    # row (an edit, a delete, an insert reusing its id) marks it pending until it is indexed again. CASE, not
    # OR: SQLite may evaluate both sides of an OR.
    "events": "SELECT count(*) FROM semantic_sources AS s JOIN events AS e ON e.id = -s.memory_row"
    " WHERE s.memory_row < 0 AND s.chunk_count > 0"
    " AND CASE WHEN e.id <= (SELECT marked_through FROM event_marker_progress)"
    " AND NOT EXISTS (SELECT 1 FROM semantic_pending AS p WHERE p.memory_row = s.memory_row) THEN 1"
    " ELSE obsmem_event_id(e.session_id, e.seq) = s.memory_id END",
}


def _total(conn: apsw.Connection, queries: dict[str, str], kind: str | None) -> int:
    chosen = list(queries.values()) if kind is None else [queries[kind]]
    return sum(int(conn.execute(sql).fetchone()[0]) for sql in chosen)


def source_count(conn: apsw.Connection, kind: str | None = None) -> int:
    """Memories and events that exist, indexed or not (``kind``: ``memories`` or ``events`` alone)."""
    return _total(conn, _SOURCE_COUNTS, kind)


def indexed_count(conn: apsw.Connection, kind: str | None = None) -> int:
    """Current memories and events represented by at least one indexed chunk (the same source, not a
    reused row; ``kind``: one kind alone)."""
    return _total(conn, _INDEXED_COUNTS, kind)
