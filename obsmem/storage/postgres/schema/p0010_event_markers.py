"""Hybrid search of conversation events on PostgreSQL: the events' index markers (SQLite's ``m0006``).

Events are indexed under their negated row (``-events.id``) in the semantic index's tables
(``p0004_semantic``), as on SQLite. An append writes no marker: when ``semantic.index.events`` is on, the
indexer marks the events above the durable watermark ``event_marker_progress.marked_through`` before each
batch (:mod:`obsmem.indexer.postgres_events`), so events stored before the setting was turned on are
indexed too. The watermark is moved under the project's writer lock, which every write of events holds, so
no event can be written below it without being seen.

Edits and deletes are marked by triggers, as memories' are, and so is an insert at or below the watermark
(an explicit id, as a restore writes). Inserts are marked by a statement trigger over the new rows (a
restore's ``COPY`` is one statement); edits, which name their columns, row by row.
"""

NAME = "event_markers"

SQL = """
CREATE TABLE event_marker_progress (
    only_row INTEGER PRIMARY KEY CHECK (only_row = 1),
    marked_through BIGINT NOT NULL CHECK (marked_through >= 0)
);
INSERT INTO event_marker_progress(only_row, marked_through) VALUES (1, 0);

CREATE FUNCTION obsmem_event_mark_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO semantic_pending(memory_row)
        SELECT -n.id FROM inserted AS n WHERE n.id <= (SELECT marked_through FROM event_marker_progress)
        ON CONFLICT(memory_row) DO UPDATE SET change = semantic_pending.change + 1;
    RETURN NULL;
END
$$;
CREATE TRIGGER events_semantic_insert AFTER INSERT ON events
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION obsmem_event_mark_inserted();

CREATE FUNCTION obsmem_event_mark_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO semantic_pending(memory_row) SELECT DISTINCT -o.id FROM deleted AS o
        ON CONFLICT(memory_row) DO UPDATE SET change = semantic_pending.change + 1;
    RETURN NULL;
END
$$;
CREATE TRIGGER events_semantic_delete AFTER DELETE ON events
    REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION obsmem_event_mark_deleted();

CREATE FUNCTION obsmem_event_mark_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO semantic_pending(memory_row) VALUES (-OLD.id)
        ON CONFLICT(memory_row) DO UPDATE SET change = semantic_pending.change + 1;
    INSERT INTO semantic_pending(memory_row) VALUES (-NEW.id)
        ON CONFLICT(memory_row) DO UPDATE SET change = semantic_pending.change + 1;
    RETURN NULL;
END
$$;
CREATE TRIGGER events_semantic_update
    AFTER UPDATE OF session_id, seq, role, type, content, tool_name, tool_args, created_at ON events
    FOR EACH ROW EXECUTE FUNCTION obsmem_event_mark_updated();
"""
