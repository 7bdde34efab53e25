"""Durable import state (migration 5): each source file's watermark (``import_files``) and the ids of the
records imported (``import_records``). The only SQL on those tables.

One row per ``(source, path)`` in the project database the file's sessions go to: how many bytes were
consumed, checksums of the head and tail of that prefix, the file's size and modification time at the
time, and the reader's state there. See :mod:`obsmem.transcripts.importer` for how they are used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from obsmem.dates import now_iso
from obsmem.errors import ProjectNotFound
from obsmem.storage import ProjectDatabase

IMPORT_MARKS_DIR = "import-marks"
"""The folder of the data directory holding :class:`UnsavedWatermarks`' files."""


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
    """Watermarks of files that stored nothing in a project that does not exist yet.

    Such a file has no database to hold its watermark (an import that stores nothing creates no project:
    an empty project listed, searched and polled for a file of bookkeeping records is not what a user
    wants), so without these every import read it again whole: each ``--follow`` round, and each new
    process (``obsmem import`` from cron, every hook call), re-read every session holding only
    bookkeeping records. With a ``directory`` (``<data_dir>/import-marks``) each mark is a small file
    there, so every process of the data directory passes over the file as over any other; without one
    (or where the directory cannot be written) they are kept in this object's memory. The mark of a file
    is dropped once its project holds the file's own watermark.

    A mark only ever says "nothing of this file up to here was stored", so one lost, dropped or left behind
    by an older process costs a read of the file, never an event stored twice or missed. Bounded: beyond
    :attr:`LIMIT` the oldest go first.
    """

    LIMIT = 16_384

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory
        self._marks: OrderedDict[tuple[str, str, str], Watermark] = OrderedDict()
        self._lock = threading.Lock()  # a service imports from several threads (HTTP requests)
        self._added = False  # a file was added to the directory since it was last pruned

    def get(self, project: str, source: str, path: str) -> Watermark | None:
        with self._lock:
            mark = self._marks.get((project, source, path))
        if mark is None and self.directory is not None:
            mark = self._read(project, source, path)
        return mark

    def put(self, project: str, mark: Watermark) -> None:
        key = (project, mark.source, mark.path)
        with self._lock:
            if self.directory is not None and self._write(project, mark):
                self._marks.pop(key, None)  # the file is the truth: another process may move it on
                return
            self._marks[key] = mark
            self._marks.move_to_end(key)
            while len(self._marks) > self.LIMIT:
                self._marks.popitem(last=False)

    def drop(self, project: str, source: str, path: str) -> None:
        with self._lock:
            self._marks.pop((project, source, path), None)
        if self.directory is not None:
            # None there is the common case (a file whose project exists); a directory not writable is another.
            with contextlib.suppress(OSError):
                self._file(project, source, path).unlink()

    def prune(self) -> None:
        """Keep the :attr:`LIMIT` newest files of the directory (after an import that added one)."""
        if self.directory is None or not self._added:
            return
        self._added = False
        try:
            entries = [(entry.stat().st_mtime_ns, entry.path) for entry in os.scandir(self.directory)]
        except OSError:
            return
        entries.sort()
        for _, name in entries[: max(len(entries) - self.LIMIT, 0)]:
            with contextlib.suppress(OSError):
                os.unlink(name)

    def _file(self, project: str, source: str, path: str) -> Path:
        assert self.directory is not None
        digest = hashlib.sha256("\0".join((project, source, path)).encode("utf-8", "surrogatepass")).hexdigest()
        return self.directory / f"{digest}.json"

    def _read(self, project: str, source: str, path: str) -> Watermark | None:
        try:
            saved = json.loads(self._file(project, source, path).read_bytes())
            if not isinstance(saved, dict) or (saved.pop("project", None), saved["source"], saved["path"]) != (
                project,
                source,
                path,
            ):
                return None
            mark = Watermark(**saved)
        except (OSError, ValueError, TypeError, KeyError):  # none, or one this version cannot read: no mark
            return None
        if not isinstance(mark.state, dict) or not all(
            isinstance(value, int) for value in (mark.offset, mark.size, mark.mtime_ns, mark.events)
        ):
            return None
        return mark

    def _write(self, project: str, mark: Watermark) -> bool:
        """Write the mark's file whole (a reader never sees half of one); False when it cannot be written."""
        target = self._file(project, mark.source, mark.path)
        scratch = target.with_name(f".{target.name}.{os.getpid()}-{threading.get_ident()}")
        try:
            body = json.dumps({"project": project, **asdict(mark)}, separators=(",", ":"), sort_keys=True)
            assert self.directory is not None
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            added = not target.exists()
            with os.fdopen(os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
                handle.write(body)
            os.replace(scratch, target)
        except (OSError, ValueError, TypeError):  # a read-only or full disk: kept in memory instead
            with contextlib.suppress(OSError):
                scratch.unlink()
            return False
        self._added = self._added or added
        return True


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
