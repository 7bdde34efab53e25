"""Canonical tables: sessions, events, memories (observations and reflections) and their provenance.

Observations and reflections share one ``memories`` table so that exact search, recall and the indexer
see one id space, one date order and one trigram index. The views ``observations`` and ``reflections``
present each kind with its own fields.
"""

NAME = "core"

SQL = """
CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    last_seq INTEGER NOT NULL DEFAULT 0,
    event_count INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

CREATE TABLE events (
    id INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(session_id),
    seq INTEGER NOT NULL CHECK (seq > 0),
    role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool', 'system')),
    type TEXT NOT NULL CHECK (type IN ('message', 'tool_call', 'tool_result')),
    content TEXT NOT NULL,
    tool_name TEXT,
    tool_args TEXT,
    tool_call_id TEXT,
    created_at TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    UNIQUE (session_id, seq)
);

CREATE TABLE memories (
    id INTEGER PRIMARY KEY,
    memory_id TEXT NOT NULL UNIQUE CHECK (length(memory_id) = 64),
    kind TEXT NOT NULL CHECK (kind IN ('observation', 'reflection')),
    session_id TEXT NOT NULL REFERENCES sessions(session_id),
    content TEXT NOT NULL,
    date TEXT NOT NULL,
    importance TEXT CHECK (importance IN ('low', 'medium', 'high', 'critical')),
    created_at TEXT NOT NULL,
    CHECK ((kind = 'observation') = (importance IS NOT NULL))
);
CREATE INDEX memories_by_date ON memories(date, id);
CREATE INDEX memories_by_session_date ON memories(session_id, date, id);

CREATE TABLE observation_sources (
    memory_row INTEGER NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (memory_row, session_id, seq),
    FOREIGN KEY (session_id, seq) REFERENCES events(session_id, seq)
) WITHOUT ROWID;
CREATE INDEX observation_sources_by_event ON observation_sources(session_id, seq);

CREATE TABLE reflection_supports (
    reflection_row INTEGER NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    observation_row INTEGER NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    PRIMARY KEY (reflection_row, observation_row)
) WITHOUT ROWID;
CREATE INDEX reflection_supports_by_observation ON reflection_supports(observation_row);

-- Substring index for exact search: trigrams of every memory, kept in step by triggers. Two U+0001
-- sentinels end each indexed text so that every occurrence of a one- or two-character needle starts
-- some trigram (found by a prefix range over the vocabulary); memory text never holds U+0001.
CREATE VIRTUAL TABLE memory_trigrams USING fts5(
    content, content='', contentless_delete=1, tokenize='trigram'
);
CREATE VIRTUAL TABLE memory_trigram_terms USING fts5vocab(memory_trigrams, 'row');

CREATE TRIGGER memories_trigrams_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memory_trigrams(rowid, content) VALUES (new.id, new.content || char(1, 1));
END;
CREATE TRIGGER memories_trigrams_delete AFTER DELETE ON memories BEGIN
    DELETE FROM memory_trigrams WHERE rowid = old.id;
END;
CREATE TRIGGER memories_trigrams_update AFTER UPDATE OF content ON memories BEGIN
    DELETE FROM memory_trigrams WHERE rowid = old.id;
    INSERT INTO memory_trigrams(rowid, content) VALUES (new.id, new.content || char(1, 1));
END;

CREATE VIEW observations AS
SELECT m.memory_id, m.session_id, m.content, substr(m.date, 1, 16) AS timestamp, m.importance,
       (SELECT json_group_array(json_object('session_id', s.session_id, 'seq', s.seq))
          FROM observation_sources AS s WHERE s.memory_row = m.id) AS source_refs,
       m.created_at
  FROM memories AS m WHERE m.kind = 'observation';

CREATE VIEW reflections AS
SELECT m.memory_id, m.session_id, m.content, substr(m.date, 1, 16) AS timestamp,
       (SELECT json_group_array(o.memory_id)
          FROM reflection_supports AS r JOIN memories AS o ON o.id = r.observation_row
         WHERE r.reflection_row = m.id) AS supporting_observation_ids,
       m.created_at
  FROM memories AS m WHERE m.kind = 'reflection';
"""
