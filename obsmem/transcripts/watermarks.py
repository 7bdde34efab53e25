"""Durable import state (migration 5): each source file's watermark (``import_files``) and the ids of the
records imported (``import_records``). The only SQL on those tables.

One row per ``(source, path)`` in the project database the file's sessions go to: how many bytes were
consumed, checksums of the head and tail of that prefix, the file's size and modification time at the
time, and the reader's state there. See :mod:`obsmem.transcripts.importer` for how they are used.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from obsmem.dates import now_iso
from obsmem.errors import ProjectNotFound
from obsmem.storage import ProjectDatabase


def watermark_key(path: Path) -> str:
    """The file as its watermark names it: its resolved path, as text even where the file system's name is
    not UTF-8 (its bad bytes written ``\\xff``), which SQLite cannot store as it stands: the import of a
    folder holding one such name stopped with a traceback, the files after it not imported."""
    return str(path.resolve()).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class ImportTarget:
    """The project a file's events go to, opened only once it exists.

    An import reads the project's watermarks, record ids and events before it knows whether the file holds
    anything to store, and a write that stores nothing must not create a project: the app's append creates
    it with the first event, and until then every read finds nothing stored and nothing is saved.
    """

    def __init__(self, name: str, open_existing: Callable[[str], ProjectDatabase]) -> None:
        self.name = name
        self._open = open_existing  # raises ProjectNotFound for a project that does not exist
        self._db: ProjectDatabase | None = None

    def existing(self) -> ProjectDatabase | None:
        """The project's database, or None while the project does not exist."""
        if self._db is None:
            try:
                self._db = self._open(self.name)
            except ProjectNotFound:
                return None
        return self._db


@dataclass
class Watermark:
    source: str
    path: str
    offset: int = 0
    size: int = 0
    mtime_ns: int = 0
    head_sha256: str = ""
    tail_sha256: str = ""
    state: dict[str, Any] = field(default_factory=dict)
    events: int = 0


class UnsavedWatermarks:
    """Watermarks of files that stored nothing in a project that does not exist yet, kept in memory.

    Such a file has no database to hold its watermark (an import that stores nothing creates no project),
    so without these every import read it again whole: each ``--follow`` round re-read every session that
    holds only bookkeeping records. One instance lives as long as its service, so a long-running process
    passes over those files as over any other; a new process reads them once more. Bounded: the oldest go
    first (a file whose mark was dropped is read again, which stores nothing twice).
    """

    LIMIT = 16_384

    def __init__(self) -> None:
        self._marks: OrderedDict[tuple[str, str, str], Watermark] = OrderedDict()
        self._lock = threading.Lock()  # a service imports from several threads (HTTP requests)

    def get(self, project: str, source: str, path: str) -> Watermark | None:
        with self._lock:
            return self._marks.get((project, source, path))

    def put(self, project: str, mark: Watermark) -> None:
        key = (project, mark.source, mark.path)
        with self._lock:
            self._marks[key] = mark
            self._marks.move_to_end(key)
            while len(self._marks) > self.LIMIT:
                self._marks.popitem(last=False)

    def drop(self, project: str, source: str, path: str) -> None:
        with self._lock:
            self._marks.pop((project, source, path), None)


def load_watermark(db: ProjectDatabase | None, source: str, path: str) -> Watermark | None:
    """The file's watermark in ``db`` (None: a project that does not exist yet, which holds none)."""
    if db is None:
        return None
    with db.read() as conn:
        row = conn.execute(
            'SELECT "offset", size, mtime_ns, head_sha256, tail_sha256, state, events FROM import_files'
            " WHERE source = ? AND path = ?",
            (source, path),
        ).fetchone()
    if row is None:
        return None
    offset, size, mtime_ns, head, tail, state, events = row
    try:
        saved = json.loads(state)
    except json.JSONDecodeError:
        saved = None
    if not isinstance(saved, dict):
        return None  # a state this version cannot read is treated as no watermark (the file is merged)
    return Watermark(source, path, offset, size, mtime_ns, head, tail, saved, events)


def save_watermark(db: ProjectDatabase, mark: Watermark) -> None:
    with db.write() as conn:
        conn.execute(
            'INSERT INTO import_files(source, path, "offset", size, mtime_ns, head_sha256, tail_sha256, state,'
            " events, imported_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ' ON CONFLICT(source, path) DO UPDATE SET "offset" = excluded."offset", size = excluded.size,'
            " mtime_ns = excluded.mtime_ns, head_sha256 = excluded.head_sha256,"
            " tail_sha256 = excluded.tail_sha256, state = excluded.state, events = excluded.events,"
            " imported_at = excluded.imported_at",
            (
                mark.source,
                mark.path,
                mark.offset,
                mark.size,
                mark.mtime_ns,
                mark.head_sha256,
                mark.tail_sha256,
                json.dumps(mark.state, separators=(",", ":"), sort_keys=True),
                mark.events,
                now_iso(),
            ),
        )


def known_records(db: ProjectDatabase, record_ids: set[str]) -> dict[str, str]:
    """The session each of ``record_ids`` was imported into, for those imported before."""
    found: dict[str, str] = {}
    ids = sorted(record_ids)
    with db.read() as conn:
        for start in range(0, len(ids), 500):
            batch = ids[start : start + 500]
            marks = ",".join("?" * len(batch))
            rows = conn.execute(f"SELECT record_id, session_id FROM import_records WHERE record_id IN ({marks})", batch)
            found.update(dict(rows))
    return found


def remember_records(db: ProjectDatabase, records: dict[str, str]) -> None:
    """Record ids now imported, with their sessions (an id already known keeps its first session)."""
    if records:
        with db.write() as conn:
            conn.executemany(
                "INSERT INTO import_records(record_id, session_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                list(records.items()),
            )
