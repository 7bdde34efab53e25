"""Pipeline II: memory generations, the active-generation pointer, drop records and model overrides.

A session's *active memory* is every reflection of the session and every observation that no promoted
generation dropped. A Reflector/Dropper run builds one generation and promotes it in a single write
transaction: its reflections (``memories`` rows, linked in ``generation_reflections``), its drop records
(``dropped_observations``), the generation's state, and the pointer, moved by compare-and-set.

- ``generations``: one row per run, keyed by ``generation_id`` (derived from the session and the active
  observation set the run started from, so duplicate runs meet on one row). ``state`` goes from
  ``running`` to exactly one of ``promoted`` (it became the active generation), ``unchanged`` (the
  Reflector added nothing; nothing moved) or ``superseded`` (another generation was promoted first).
  A finished generation is never written again, and records can only be attached to a running one
  (triggers below), so a late or stale writer cannot change history.
- ``active_generation``: one pointer per session. It moves only forward, one number at a time, to a
  promoted generation whose parent is the generation it pointed at (triggers below): generations form one
  chain per session, and ``number`` is the session's generation count.
- ``generation_reflections``: the reflections each generation added.
- ``dropped_observations``: drop records. An observation listed here has left the active memory; its
  ``memories`` row stays, so it is still searchable and recallable. Append-only.

Both record tables go with their memory only when a user deletes the memory itself (``forget``): the
cascade removes the record, while deleting a record of a memory that still exists is refused.
- ``model_overrides``: per-project, per-role model ids switched at run time (``PUT .../models``); the
  next job of that role uses them.
"""

NAME = "generations"

SQL = """
CREATE TABLE generations (
    id INTEGER PRIMARY KEY,
    generation_id TEXT NOT NULL UNIQUE CHECK (length(generation_id) = 64),
    session_id TEXT NOT NULL REFERENCES sessions(session_id),
    state TEXT NOT NULL DEFAULT 'running'
        CHECK (state IN ('running', 'promoted', 'unchanged', 'superseded')),
    parent INTEGER REFERENCES generations(id),
    number INTEGER CHECK (number IS NULL OR number >= 1),
    job_id INTEGER,
    cycle_id TEXT,
    claims INTEGER NOT NULL DEFAULT 1,
    observations_before INTEGER NOT NULL DEFAULT 0,
    observation_tokens_before INTEGER NOT NULL DEFAULT 0,
    observation_tokens_after INTEGER,
    reflections_added INTEGER NOT NULL DEFAULT 0,
    observations_dropped INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    finished_at TEXT,
    CHECK ((state = 'promoted') = (number IS NOT NULL))
);
CREATE UNIQUE INDEX generations_number ON generations(session_id, number) WHERE number IS NOT NULL;
CREATE INDEX generations_by_session ON generations(session_id, state);

CREATE TRIGGER generations_finished_are_final BEFORE UPDATE ON generations
WHEN old.state != 'running'
BEGIN
    SELECT RAISE(ABORT, 'a finished generation is never written again');
END;

CREATE TRIGGER generations_never_deleted BEFORE DELETE ON generations
BEGIN
    SELECT RAISE(ABORT, 'generations are never deleted');
END;

CREATE TABLE active_generation (
    session_id TEXT PRIMARY KEY REFERENCES sessions(session_id),
    generation_row INTEGER NOT NULL REFERENCES generations(id),
    number INTEGER NOT NULL CHECK (number >= 1),
    promoted_at TEXT NOT NULL
) WITHOUT ROWID;

CREATE TRIGGER active_generation_first BEFORE INSERT ON active_generation
WHEN new.number != 1
  OR (SELECT state FROM generations WHERE id = new.generation_row) IS NOT 'promoted'
  OR (SELECT parent FROM generations WHERE id = new.generation_row) IS NOT NULL
  OR (SELECT session_id FROM generations WHERE id = new.generation_row) IS NOT new.session_id
BEGIN
    SELECT RAISE(ABORT, 'the first active generation must be promoted generation 1 with no parent');
END;

CREATE TRIGGER active_generation_forward BEFORE UPDATE ON active_generation
WHEN new.session_id != old.session_id
  OR new.number != old.number + 1
  OR (SELECT state FROM generations WHERE id = new.generation_row) IS NOT 'promoted'
  OR (SELECT parent FROM generations WHERE id = new.generation_row) IS NOT old.generation_row
BEGIN
    SELECT RAISE(ABORT, 'the active generation only moves to a promoted child of the active one');
END;

CREATE TRIGGER active_generation_never_deleted BEFORE DELETE ON active_generation
BEGIN
    SELECT RAISE(ABORT, 'the active generation pointer is never deleted');
END;

CREATE TABLE generation_reflections (
    generation_row INTEGER NOT NULL REFERENCES generations(id),
    reflection_row INTEGER NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    PRIMARY KEY (generation_row, reflection_row)
) WITHOUT ROWID;
CREATE INDEX generation_reflections_by_reflection ON generation_reflections(reflection_row);

CREATE TRIGGER generation_reflections_are_final BEFORE UPDATE ON generation_reflections
BEGIN
    SELECT RAISE(ABORT, 'generation records are never changed');
END;

CREATE TRIGGER generation_reflections_kept_with_their_memory BEFORE DELETE ON generation_reflections
WHEN EXISTS (SELECT 1 FROM memories WHERE id = old.reflection_row)
BEGIN
    SELECT RAISE(ABORT, 'generation records go only with their memory');
END;

CREATE TRIGGER generation_reflections_only_while_running BEFORE INSERT ON generation_reflections
WHEN (SELECT state FROM generations WHERE id = new.generation_row) IS NOT 'running'
BEGIN
    SELECT RAISE(ABORT, 'records are attached to a running generation only');
END;

CREATE TABLE dropped_observations (
    observation_row INTEGER PRIMARY KEY REFERENCES memories(id) ON DELETE CASCADE,
    session_id TEXT NOT NULL,
    generation_row INTEGER NOT NULL REFERENCES generations(id),
    rank INTEGER NOT NULL,
    citations INTEGER NOT NULL,
    dropped_at TEXT NOT NULL
);
CREATE INDEX dropped_by_generation ON dropped_observations(generation_row);
CREATE INDEX dropped_by_session ON dropped_observations(session_id);

CREATE TRIGGER dropped_only_while_running BEFORE INSERT ON dropped_observations
WHEN (SELECT state FROM generations WHERE id = new.generation_row) IS NOT 'running'
BEGIN
    SELECT RAISE(ABORT, 'records are attached to a running generation only');
END;

CREATE TRIGGER dropped_observations_are_final BEFORE UPDATE ON dropped_observations
BEGIN
    SELECT RAISE(ABORT, 'drop records are never changed');
END;

CREATE TRIGGER dropped_observations_kept_with_their_memory BEFORE DELETE ON dropped_observations
WHEN EXISTS (SELECT 1 FROM memories WHERE id = old.observation_row)
BEGIN
    SELECT RAISE(ABORT, 'drop records go only with their memory');
END;

CREATE TABLE model_overrides (
    role TEXT PRIMARY KEY CHECK (role IN ('observer', 'reflector', 'dropper')),
    model_id TEXT NOT NULL CHECK (length(model_id) BETWEEN 1 AND 200),
    context_window_tokens INTEGER CHECK (context_window_tokens IS NULL OR context_window_tokens >= 2048),
    updated_at TEXT NOT NULL
) WITHOUT ROWID;
"""
