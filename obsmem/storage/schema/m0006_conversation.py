"""Conversation search: event ids, the events' substring index and date order, and their index markers.

Events become searchable like memories (``memory_search`` with ``scope`` ``conversation`` or ``all``):

- An event's id is the SHA-256 of its address (:func:`obsmem.ids.event_id`), the id search hits and
  ``recall`` use. It is not stored: reads derive it from ``session_id`` and ``seq`` with the
  ``obsmem_event_id`` SQL function every obsmem connection registers (a stored column cost an append a
  tenth of its time, and the id can never disagree with the address it hashes).
- ``event_trigrams`` holds the trigrams of each event's content and tool arguments, with the same two
  U+0001 sentinels after each text as ``memory_trigrams`` (so one- and two-character needles start some
  trigram, and no trigram spans the content and the arguments). It is filled *after* the append, not in
  its transaction (a trigram index of every event tripled an append's cost): the one row of
  ``event_trigram_progress`` is a durable watermark, every event with ``id <= indexed_through`` is in the
  index, and :func:`obsmem.events.index_event_trigrams` moves it forward (housekeeping does, in batches).
  Exact search reads the index up to the watermark and scans the events above it directly, so its answer
  never depends on how far the index has got. Triggers keep indexed rows in step (an edit or delete at or
  below the watermark, and an insert there: a reused id of a deleted last event).
- ``event_keys`` holds each event's id prefix (its first 12 characters, the shortest prefix recall takes;
  unique in practice, and the full id is compared after) up to the same watermark, filled by the same
  catch-up; recall looks an id up there and among the events above the watermark.
- ``events_by_date`` and ``events_by_session_date`` give exact search its newest-first walk. They are
  partial indexes of the events up to the same watermark (``in_date_order = 1``, set by the catch-up):
  two date index entries cost an append a tenth of its time. The walk reads the events above the
  watermark directly and merges them in.
- Events are marked in ``semantic_pending`` under the negated event row (``-events.id``): memory rows are
  positive, so one marker table and one chunk table name both kinds of source without a collision. An
  append writes no marker (a trigger marking every new event cost it a fifth of its time, for an index
  that is off by default): when ``semantic.index.events`` is on, the indexer marks the events above the
  durable watermark ``event_marker_progress.marked_through`` before each batch
  (:func:`obsmem.indexer.sources.mark_new_events`), so events stored before the setting was turned on
  are indexed too. Edits and deletes are marked by triggers, as memories' are, and so is an insert at or
  below the watermark (a reused id of a deleted last event).
"""

NAME = "conversation"

SQL = """
-- Ids are looked up by their display prefix (12 characters, the shortest recall takes), kept in
-- event_keys up to the same watermark as the trigram index (an index on the events table cost an append
-- a tenth of its time); recall checks the events above the watermark directly.
CREATE TABLE event_keys (
    key TEXT NOT NULL,
    event_row INTEGER NOT NULL,
    PRIMARY KEY (key, event_row)
) WITHOUT ROWID;

-- Date order holds the events up to the trigram watermark, too: in_date_order is 1 exactly for them
-- (an append leaves it NULL and pays for no date index entry; the catch-up sets it).
ALTER TABLE events ADD COLUMN in_date_order INTEGER;
CREATE INDEX events_by_date ON events(created_at, id) WHERE in_date_order = 1;
CREATE INDEX events_by_session_date ON events(session_id, created_at, id) WHERE in_date_order = 1;

CREATE VIRTUAL TABLE event_trigrams USING fts5(
    content, content='', contentless_delete=1, tokenize='trigram'
);
CREATE VIRTUAL TABLE event_trigram_terms USING fts5vocab(event_trigrams, 'row');
-- Events already stored are indexed by the first catch-up, not by the migration.
CREATE TABLE event_trigram_progress (
    only_row INTEGER PRIMARY KEY CHECK (only_row = 1),
    indexed_through INTEGER NOT NULL CHECK (indexed_through >= 0)
);
INSERT INTO event_trigram_progress(only_row, indexed_through) VALUES (1, 0);

CREATE TRIGGER events_trigrams_insert AFTER INSERT ON events
WHEN new.id <= (SELECT indexed_through FROM event_trigram_progress) BEGIN
    INSERT INTO event_trigrams(rowid, content)
        VALUES (new.id, new.content || char(1, 1) || coalesce(new.tool_args || char(1, 1), ''));
    INSERT INTO event_keys(key, event_row) VALUES (substr(obsmem_event_id(new.session_id, new.seq), 1, 12), new.id);
    UPDATE events SET in_date_order = 1 WHERE id = new.id;
END;
CREATE TRIGGER events_trigrams_delete AFTER DELETE ON events
WHEN old.id <= (SELECT indexed_through FROM event_trigram_progress) BEGIN
    DELETE FROM event_trigrams WHERE rowid = old.id;
    DELETE FROM event_keys
        WHERE key = substr(obsmem_event_id(old.session_id, old.seq), 1, 12) AND event_row = old.id;
END;
-- An event given a new address has a new id.
CREATE TRIGGER events_keys_update AFTER UPDATE OF session_id, seq ON events
WHEN old.id <= (SELECT indexed_through FROM event_trigram_progress) BEGIN
    DELETE FROM event_keys
        WHERE key = substr(obsmem_event_id(old.session_id, old.seq), 1, 12) AND event_row = old.id;
    INSERT INTO event_keys(key, event_row) VALUES (substr(obsmem_event_id(new.session_id, new.seq), 1, 12), new.id);
END;
CREATE TRIGGER events_trigrams_update AFTER UPDATE OF content, tool_args ON events
WHEN old.id <= (SELECT indexed_through FROM event_trigram_progress) BEGIN
    DELETE FROM event_trigrams WHERE rowid = old.id;
    INSERT INTO event_trigrams(rowid, content)
        VALUES (new.id, new.content || char(1, 1) || coalesce(new.tool_args || char(1, 1), ''));
END;

-- Events already stored are marked by the indexer's first catch-up, when events are indexed at all.
CREATE TABLE event_marker_progress (
    only_row INTEGER PRIMARY KEY CHECK (only_row = 1),
    marked_through INTEGER NOT NULL CHECK (marked_through >= 0)
);
INSERT INTO event_marker_progress(only_row, marked_through) VALUES (1, 0);
CREATE TRIGGER events_semantic_insert AFTER INSERT ON events
WHEN new.id <= (SELECT marked_through FROM event_marker_progress) BEGIN
    INSERT INTO semantic_pending(memory_row) VALUES (-new.id)
        ON CONFLICT(memory_row) DO UPDATE SET change = change + 1;
END;
CREATE TRIGGER events_semantic_update
AFTER UPDATE OF session_id, seq, role, type, content, tool_name, tool_args, created_at ON events BEGIN
    INSERT INTO semantic_pending(memory_row) VALUES (-old.id)
        ON CONFLICT(memory_row) DO UPDATE SET change = change + 1;
    INSERT INTO semantic_pending(memory_row) VALUES (-new.id)
        ON CONFLICT(memory_row) DO UPDATE SET change = change + 1;
END;
CREATE TRIGGER events_semantic_delete AFTER DELETE ON events BEGIN
    INSERT INTO semantic_pending(memory_row) VALUES (-old.id)
        ON CONFLICT(memory_row) DO UPDATE SET change = change + 1;
END;
"""
