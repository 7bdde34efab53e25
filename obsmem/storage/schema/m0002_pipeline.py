"""Pipeline I: the durable job queue, Observer coverage and progress, current activity, the om event log.

- ``jobs``: at-least-once work items. A claim sets a lease (owner, expiry) and bumps ``fence``; every
  commit a handler makes re-checks ``(state, fence, lease_expires)`` inside its own write transaction, so
  a worker whose lease expired can no longer commit. Jobs sharing an ``order_key`` (a session) run one at
  a time in id order; at most one *queued* job exists per ``dedupe_key``.
- ``coverage``: which events the Observer has seen, by ``(session_id, seq, part_start)``. A whole event is
  one row ``part_start = 0, final = 1``; an event too large for one request is cut into parts whose rows
  tile its rendered text, the last one ``final = 1``. Rows are written in the same transaction as the
  observations made from them, so each event is covered exactly once.
- ``observer_progress``: one row per session: unobserved token and event counts (kept by the append hook
  and by coverage commits) and the coverage watermark, which a trigger forbids from moving backwards.
- ``current_activity``: at most one row per session while a model stage runs (ephemeral, job-guarded).
- ``om_events``: the append-only pipeline event log (``om_observation_start`` ... ``job_failed``); ids
  only grow, so a reader resumes from the last id it saw.
"""

NAME = "pipeline"

SQL = """
CREATE TABLE jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    order_key TEXT,
    dedupe_key TEXT,
    payload TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(payload)),
    state TEXT NOT NULL DEFAULT 'queued' CHECK (state IN ('queued', 'running', 'done', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts INTEGER NOT NULL CHECK (max_attempts >= 1),
    run_after REAL NOT NULL,
    fence INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT,
    lease_expires REAL,
    last_error TEXT,
    merged_into INTEGER REFERENCES jobs(id),
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    finished_at TEXT,
    CHECK ((state = 'running') = (lease_owner IS NOT NULL AND lease_expires IS NOT NULL))
);
CREATE INDEX jobs_ready ON jobs(state, run_after, id);
CREATE INDEX jobs_by_order_key ON jobs(order_key, state, id);
CREATE INDEX jobs_finished ON jobs(state, finished_at);
CREATE UNIQUE INDEX jobs_one_queued_per_key ON jobs(dedupe_key)
    WHERE state = 'queued' AND dedupe_key IS NOT NULL;

CREATE TABLE coverage (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    part_start INTEGER NOT NULL DEFAULT 0 CHECK (part_start >= 0),
    part_end INTEGER,
    final INTEGER NOT NULL CHECK (final IN (0, 1)),
    cycle_id TEXT NOT NULL,
    job_id INTEGER,
    covered_at TEXT NOT NULL,
    PRIMARY KEY (session_id, seq, part_start),
    FOREIGN KEY (session_id, seq) REFERENCES events(session_id, seq),
    CHECK (part_end IS NULL OR part_end > part_start)
) WITHOUT ROWID;
CREATE UNIQUE INDEX coverage_one_final_per_event ON coverage(session_id, seq) WHERE final = 1;
CREATE INDEX coverage_by_cycle ON coverage(cycle_id);

CREATE TABLE observer_progress (
    session_id TEXT PRIMARY KEY REFERENCES sessions(session_id),
    pending_tokens INTEGER NOT NULL DEFAULT 0,
    pending_events INTEGER NOT NULL DEFAULT 0,
    observed_through_seq INTEGER NOT NULL DEFAULT 0,
    scan_from_seq INTEGER NOT NULL DEFAULT 1,
    observed_tokens INTEGER NOT NULL DEFAULT 0,
    cycles INTEGER NOT NULL DEFAULT 0,
    last_observed_at TEXT
) WITHOUT ROWID;

CREATE TRIGGER observer_watermark_only_forward
BEFORE UPDATE OF observed_through_seq ON observer_progress
WHEN new.observed_through_seq < old.observed_through_seq
BEGIN
    SELECT RAISE(ABORT, 'coverage watermark must not move backwards');
END;

CREATE TRIGGER coverage_is_append_only BEFORE UPDATE ON coverage
BEGIN
    SELECT RAISE(ABORT, 'coverage rows are never changed');
END;

CREATE TABLE current_activity (
    session_id TEXT PRIMARY KEY,
    job_id INTEGER NOT NULL,
    stage TEXT NOT NULL,
    tokens INTEGER NOT NULL DEFAULT 0,
    started_at REAL NOT NULL,
    updated_at REAL NOT NULL
) WITHOUT ROWID;

CREATE TABLE om_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    type TEXT NOT NULL,
    session_id TEXT,
    cycle_id TEXT,
    job_id INTEGER,
    created_at TEXT NOT NULL,
    data TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(data))
);
CREATE INDEX om_events_by_session ON om_events(session_id, id);
CREATE INDEX om_events_by_type ON om_events(type, id);
"""
