"""Notes written by agents and people, the judgments made about them and the append-only trust ledger.

- ``notes``: one row per note. ``status`` moves candidate -> trusted (a groom pass promoted it), trusted ->
  superseded (a promoted update replaced it) and anything -> forgotten. ``supersedes`` names the note an
  update would replace once it is promoted. A project database holds the project tier; a user database
  (``users/<owner>/obsmem.db``) holds the same tables for the user tier.
- ``note_words``: the keyword index of note content and situation (hybrid search), and ``note_trigrams``,
  the substring index of note content (exact search of needles of 3 characters or more, checked with LIKE
  afterwards), both kept in step by triggers.
- ``judgments``: one row per judgment of one candidate against one query: the judge's ``p`` (or the error
  that stopped it), the decision, the state (open, escalated, resolved) and the outcome a person gave.
  These rows are the calibration corpus, keyed by ``judgment_id``.
- ``trust_ledger``: every judgment, decision, resolution, promotion, supersession, forget and re-save (a
  forgotten note saved again: a new life that needs a new judgment), appended in the transaction that made
  it; triggers refuse any change or deletion. ``tier`` names the tier of the note; a project database also
  holds copies of the judged and resolved entries of user-tier notes judged through that project
  (``tier = 'user'``), so its ledger tells every judgment the project asked for.
"""

NAME = "notes"

SQL = """
CREATE TABLE notes (
    id INTEGER PRIMARY KEY,
    note_id TEXT NOT NULL UNIQUE CHECK (length(note_id) = 64),
    tier TEXT NOT NULL CHECK (tier IN ('project', 'user')),
    content TEXT NOT NULL,
    situation TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL DEFAULT 'candidate'
        CHECK (status IN ('candidate', 'trusted', 'superseded', 'forgotten')),
    supersedes TEXT,
    superseded_by TEXT,
    date TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX notes_by_status ON notes(status, date, id);
CREATE INDEX notes_by_date ON notes(date, id);

CREATE VIRTUAL TABLE note_words USING fts5(
    content, situation, content='notes', content_rowid='id', tokenize='unicode61 remove_diacritics 2'
);
CREATE VIRTUAL TABLE note_trigrams USING fts5(content, content='notes', content_rowid='id', tokenize='trigram');
CREATE TRIGGER notes_words_insert AFTER INSERT ON notes BEGIN
    INSERT INTO note_words(rowid, content, situation) VALUES (new.id, new.content, new.situation);
    INSERT INTO note_trigrams(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER notes_words_delete AFTER DELETE ON notes BEGIN
    INSERT INTO note_words(note_words, rowid, content, situation)
        VALUES ('delete', old.id, old.content, old.situation);
    INSERT INTO note_trigrams(note_trigrams, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER notes_words_update AFTER UPDATE OF content, situation ON notes BEGIN
    INSERT INTO note_words(note_words, rowid, content, situation)
        VALUES ('delete', old.id, old.content, old.situation);
    INSERT INTO note_words(rowid, content, situation) VALUES (new.id, new.content, new.situation);
    INSERT INTO note_trigrams(note_trigrams, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO note_trigrams(rowid, content) VALUES (new.id, new.content);
END;

CREATE TABLE judgments (
    judgment_id TEXT PRIMARY KEY,
    note_id TEXT NOT NULL REFERENCES notes(note_id),
    query TEXT NOT NULL,
    provider TEXT NOT NULL,
    p REAL CHECK (p IS NULL OR (p >= 0 AND p <= 1)),
    decision TEXT NOT NULL CHECK (decision IN ('inject', 'hold', 'escalate')),
    state TEXT NOT NULL CHECK (state IN ('open', 'escalated', 'resolved')),
    outcome INTEGER CHECK (outcome IS NULL OR outcome IN (0, 1)),
    error TEXT,
    created_at TEXT NOT NULL,
    resolved_at TEXT,
    CHECK ((state = 'resolved') = (outcome IS NOT NULL))
) WITHOUT ROWID;
CREATE INDEX judgments_by_note ON judgments(note_id, state);
CREATE INDEX judgments_by_state ON judgments(state, created_at);

CREATE TABLE trust_ledger (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    entry TEXT NOT NULL
        CHECK (entry IN ('judged', 'resolved', 'promoted', 'superseded', 'forgotten', 'resaved')),
    tier TEXT NOT NULL DEFAULT 'project' CHECK (tier IN ('project', 'user')),
    note_id TEXT NOT NULL,
    judgment_id TEXT,
    p REAL,
    decision TEXT,
    outcome INTEGER,
    error TEXT,
    created_at TEXT NOT NULL
);
CREATE INDEX trust_ledger_by_note ON trust_ledger(note_id, id);
CREATE INDEX trust_ledger_by_judgment ON trust_ledger(judgment_id) WHERE judgment_id IS NOT NULL;
CREATE TRIGGER trust_ledger_no_update BEFORE UPDATE ON trust_ledger
BEGIN
    SELECT RAISE(ABORT, 'the trust ledger is append-only');
END;
CREATE TRIGGER trust_ledger_no_delete BEFORE DELETE ON trust_ledger
BEGIN
    SELECT RAISE(ABORT, 'the trust ledger is append-only');
END;
"""
