"""Semantic index: state row, pending changes, chunks and their embeddings (all derived data).

Canonical memories stay in ``memories``; everything here can be dropped and rebuilt from them. Triggers
record every memory insert, edit and delete in ``semantic_pending`` inside the writer's own transaction,
so the indexer's work is proportional to what changed and nothing is missed after a crash. They run
whether or not semantic mode is on (one small row per change), so turning it on later starts from an
exact list of what to index.

The keyword table (``semantic_fts``) and its vocabulary are created by the indexer, not here, because
their tokenizer is a setting; its name is recorded in ``semantic_state.fts_tokenizer``.
"""

NAME = "semantic"

SQL = """
CREATE TABLE semantic_state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    signature TEXT,
    dimensions INTEGER,
    fts_tokenizer TEXT,
    dirty INTEGER NOT NULL DEFAULT 0 CHECK (dirty IN (0, 1)),
    version INTEGER NOT NULL DEFAULT 0,
    hnsw_file TEXT,
    hnsw_bytes INTEGER,
    hnsw_checksum TEXT,
    hnsw_version INTEGER,
    hnsw_count INTEGER,
    removed_floor INTEGER NOT NULL DEFAULT 0,
    updated_at TEXT
);
INSERT INTO semantic_state(id) VALUES (1);

CREATE TABLE semantic_pending (
    memory_row INTEGER PRIMARY KEY,
    change INTEGER NOT NULL DEFAULT 1
);
INSERT INTO semantic_pending(memory_row) SELECT id FROM memories;

CREATE TRIGGER memories_semantic_insert AFTER INSERT ON memories BEGIN
    INSERT INTO semantic_pending(memory_row) VALUES (new.id)
        ON CONFLICT(memory_row) DO UPDATE SET change = change + 1;
END;
CREATE TRIGGER memories_semantic_update AFTER UPDATE OF memory_id, content, date, session_id ON memories BEGIN
    INSERT INTO semantic_pending(memory_row) VALUES (old.id)
        ON CONFLICT(memory_row) DO UPDATE SET change = change + 1;
    INSERT INTO semantic_pending(memory_row) VALUES (new.id)
        ON CONFLICT(memory_row) DO UPDATE SET change = change + 1;
END;
CREATE TRIGGER memories_semantic_delete AFTER DELETE ON memories BEGIN
    INSERT INTO semantic_pending(memory_row) VALUES (old.id)
        ON CONFLICT(memory_row) DO UPDATE SET change = change + 1;
END;

CREATE TABLE semantic_sources (
    memory_row INTEGER PRIMARY KEY,
    memory_id TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    chunk_count INTEGER NOT NULL
);

CREATE TABLE semantic_chunks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    chunk_key TEXT NOT NULL UNIQUE,
    memory_row INTEGER NOT NULL REFERENCES semantic_sources(memory_row),
    position INTEGER NOT NULL,
    date TEXT NOT NULL,
    session_id TEXT NOT NULL,
    text TEXT NOT NULL
);
CREATE INDEX semantic_chunks_by_memory ON semantic_chunks(memory_row, position);

CREATE TABLE semantic_vectors (
    chunk INTEGER PRIMARY KEY REFERENCES semantic_chunks(id),
    embedding BLOB NOT NULL
);

-- Vector labels removed at each state version, so another process holding the vectors in memory can
-- catch up without rescanning; entries up to removed_floor are pruned when an index file is published.
CREATE TABLE semantic_removed (
    label INTEGER PRIMARY KEY,
    version INTEGER NOT NULL
);
"""
