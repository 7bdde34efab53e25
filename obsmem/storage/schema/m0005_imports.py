"""Transcript imports: one watermark per imported source file.

- ``import_files``: how far each source file (an agent's transcript, keyed by the source kind and the
  file's absolute path) has been imported into this project. ``offset`` is the number of bytes consumed
  (complete records only); ``head_sha256`` and ``tail_sha256`` are checksums of the first and last 64 KiB
  of that consumed prefix, so a file that was rewritten or truncated is told apart from one that only
  grew; ``size`` and ``mtime_ns`` let an unchanged file be passed over without being read. ``state`` is
  the reader's JSON state at ``offset`` (the next seq of each session, the tool names of recent calls),
  so a later import numbers its events exactly as one import of the whole file would.

The watermark is written after the events of each chunk are committed; a crash between the two re-reads
the chunk, whose events then get the same seqs and are counted as duplicates.

- ``import_records``: the agent's own id of every record imported (Claude Code's ``uuid``) and the session
  it went to. Claude Code writes a resumed session as a new file that replays the earlier session's
  records with their ids, and sometimes writes one record several times: a record whose id is known is
  not imported again.
"""

NAME = "imports"

SQL = """
CREATE TABLE import_files (
    source TEXT NOT NULL,
    path TEXT NOT NULL,
    offset INTEGER NOT NULL DEFAULT 0 CHECK (offset >= 0),
    size INTEGER NOT NULL DEFAULT 0,
    mtime_ns INTEGER NOT NULL DEFAULT 0,
    head_sha256 TEXT NOT NULL DEFAULT '',
    tail_sha256 TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL DEFAULT '{}',
    events INTEGER NOT NULL DEFAULT 0,
    imported_at TEXT NOT NULL,
    PRIMARY KEY (source, path)
) WITHOUT ROWID;

CREATE TABLE import_records (
    record_id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL
) WITHOUT ROWID;
"""
