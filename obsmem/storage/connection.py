"""SQLite connections for one project database.

apsw rather than the stdlib module: it bundles a current SQLite with FTS5 and can load extensions
(sqlite-vec). The rules that keep a database safe under several threads and processes live here:

- WAL journal, ``synchronous=FULL``: an acknowledged commit survives a killed process and a power cut.
- Every write runs inside ``BEGIN IMMEDIATE``. A deferred transaction that later upgrades to a write
  fails at once with "database is locked", ignoring the busy timeout; taking the write lock first makes
  writers queue instead.
- One connection per thread, never shared: :meth:`ProjectDatabase.connection` hands each thread its own.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw

from obsmem.errors import StorageCorrupt, StorageError
from obsmem.ids import event_id
from obsmem.storage.faults import busy, read_only, storage_fault

BUSY_TIMEOUT_MS = 30_000
# The write-ahead log is folded back into the database and truncated once it passes this size. SQLite's
# automatic checkpoint (every 1000 pages) reuses the log but never shrinks it, so one large ingest, or
# readers holding back a checkpoint under sustained load, used to leave a log of hundreds of MB for good.
WAL_TRUNCATE_BYTES = 32 * 1024 * 1024
CHECKPOINT_BUSY_MS = 200
LOCK_POLL_SECONDS = 0.05  # how often a write with a lock-wait bound looks at the lock (and at its bound) again
_capabilities_checked = False
_capabilities_lock = threading.Lock()


def _load_vector_extension(conn: apsw.Connection) -> None:
    import sqlite_vec

    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    conn.enable_load_extension(False)


def check_sqlite_capabilities() -> None:
    """Fail early, with a clear message, if this SQLite lacks FTS5 or cannot load sqlite-vec."""
    global _capabilities_checked
    with _capabilities_lock:
        if _capabilities_checked:
            return
        conn = apsw.Connection(":memory:")
        try:
            conn.execute("CREATE VIRTUAL TABLE probe USING fts5(x, tokenize='trigram')")
        except apsw.Error as exc:
            raise StorageError(f"this SQLite build lacks FTS5 with the trigram tokenizer: {exc}") from None
        try:
            _load_vector_extension(conn)
            conn.execute("SELECT vec_version()").fetchall()
        except Exception as exc:  # ImportError, apsw.ExtensionLoadingError, ...
            raise StorageError(f"cannot load the sqlite-vec extension: {exc}") from None
        finally:
            conn.close()
        _capabilities_checked = True


MMAP_BYTES = 16 * 1024**3


def _read_only_directory(directory: Path) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY) or not os.access(directory, os.W_OK)
    except OSError:
        return False


def open_connection(path: Path, *, create: bool) -> apsw.Connection:
    """Open one connection with obsmem's pragmas. ``create=False`` never creates a file.

    In a data directory that cannot be written, where SQLite cannot create the ``-shm`` file a WAL
    database needs even for reading, the database is opened as a read-only snapshot instead (see
    :func:`open_snapshot`), so reads keep working and writes fail as ``storage_read_only``.
    """
    flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_NOFOLLOW
    if create:
        flags |= apsw.SQLITE_OPEN_CREATE
    try:
        conn = apsw.Connection(str(path), flags=flags)
    except apsw.CantOpenError:
        if _read_only_directory(path.parent):
            return _read_only_fallback(path, create=create)
        raise StorageError(f"cannot open database {path.name}") from None
    except apsw.Error as exc:
        raise _open_error(exc, path) from None
    _prepare(conn)
    failure = _first_read(conn, path, "PRAGMA journal_mode=WAL")
    if failure is not None:
        if isinstance(failure, apsw.CantOpenError) and _read_only_directory(path.parent):
            # The -shm file of a WAL database cannot be created here.
            return _read_only_fallback(path, create=create)
        fault = storage_fault(failure)
        if fault is None:
            raise failure
        raise fault from None
    conn.execute("PRAGMA synchronous=FULL")
    # Whenever a checkpoint resets the log, cut the file back to this size (SQLite keeps it otherwise).
    conn.execute(f"PRAGMA journal_size_limit={WAL_TRUNCATE_BYTES}").fetchall()
    _configure(conn)
    return conn


def _read_only_fallback(path: Path, *, create: bool) -> SnapshotConnection:
    """An existing database in a directory that cannot be written is read as a snapshot; a new one
    cannot be made there."""
    if not create:
        return open_snapshot(path)
    raise read_only() from None


def _first_read(conn: apsw.Connection, path: Path, statement: str) -> apsw.Error | None:
    """Run the first statement that reads the file. A damaged file is ``storage_corrupt``; any other
    failure closes the connection and is returned for the caller to map."""
    try:
        conn.execute(statement).fetchall()
    except (apsw.NotADBError, apsw.CorruptError):
        conn.close()
        raise _damaged(path) from None
    except apsw.Error as exc:
        conn.close()
        return exc
    return None


def _open_error(exc: apsw.Error, path: Path) -> StorageError:
    return storage_fault(exc) or StorageError(f"cannot open database {path.name}")


class SnapshotConnection(apsw.Connection):
    """A read-only connection that treats the database file as unchanging (SQLite's ``immutable``);
    ``stamp`` is the file as it was opened, to notice a change made through another path."""

    stamp: tuple[int, int, int] | None = None


def file_stamp(path: Path) -> tuple[int, int, int] | None:
    """Inode, size and modification time of ``path`` (None when it is gone)."""
    try:
        info = path.stat()
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def open_snapshot(path: Path) -> SnapshotConnection:
    """Open a database in a directory that cannot be written, read-only and without the ``-shm`` file.

    SQLite reads a WAL database only through its shared-memory index, a ``-shm`` file beside it; a
    database closed cleanly has none, and on a read-only mount none can be made. Opened ``immutable``,
    SQLite reads the file alone, which is the whole database exactly when no write-ahead log exists.
    A log that exists holds committed pages only its index can find, so then the database cannot be read
    here: that is ``storage_read_only``, never a stale answer. :class:`ProjectDatabase` drops a snapshot
    and reopens as soon as the directory can be written again, a log appears or the file changes (a
    writer reaching the same files through another path); a read already running finishes on it.
    """
    if _wal_path(path).exists():
        raise read_only() from None
    stamp = file_stamp(path)
    uri = "file:" + urllib.parse.quote(str(path)) + "?immutable=1"
    flags = apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI | apsw.SQLITE_OPEN_NOFOLLOW
    try:
        conn = SnapshotConnection(uri, flags=flags)
    except apsw.Error as exc:
        raise _open_error(exc, path) from None
    _prepare(conn)
    failure = _first_read(conn, path, "PRAGMA schema_version")
    if failure is not None:
        raise _open_error(failure, path) from None
    _configure(conn)
    conn.stamp = stamp
    return conn


def _prepare(conn: apsw.Connection) -> None:
    """What every connection needs before its first statement, writable or not."""
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    _load_vector_extension(conn)
    # Event ids are derived from the address by it, never stored (migration 6).
    conn.create_scalar_function(EVENT_ID_FUNCTION, _sql_event_id, 2, deterministic=True)


EVENT_ID_FUNCTION = "obsmem_event_id"


def sql_dialect(conn: object) -> str:
    """``"sqlite"`` or ``"postgres"``: the SQL a connection speaks, for the few statements an owning module
    must write twice (a PostgreSQL connection says so; an apsw connection has no such attribute)."""
    return str(getattr(conn, "dialect", "sqlite"))


def byte_order(conn: object) -> str:
    """What follows a text column in an ORDER BY so that it sorts by its bytes, as SQLite sorts text:
    ``COLLATE "C"`` on PostgreSQL, where a database's default collation may be a language's (which, for
    one, puts ``a0`` before ``a.b`` and ``a`` before ``B``), and nothing on SQLite."""
    return ' COLLATE "C"' if sql_dialect(conn) == "postgres" else ""


def _sql_event_id(session_id: str | None, seq: int | None) -> str | None:
    # NULL for a missing event (an outer join's empty side), as a stored column would read.
    if session_id is None or seq is None:
        return None
    return event_id(session_id, seq)


def _configure(conn: apsw.Connection) -> None:
    """The pragmas every connection gets once the file is known to be a database, writable or not."""
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA temp_store=MEMORY")
    conn.execute("PRAGMA cache_size=-65536")  # 64 MiB page cache per connection
    # Map the whole file (up to 16 GiB; the mapping is only address space until pages are read): reads
    # then come straight from the OS page cache. Hybrid search validates candidates scattered over a large
    # database, and with a 256 MiB map each of those row lookups was a read() call — 40% slower at 1M chunks.
    conn.execute(f"PRAGMA mmap_size={MMAP_BYTES}")


def _damaged(path: Path) -> StorageCorrupt:
    return StorageCorrupt(
        f"database {path.parent.name}/{path.name} is not a readable SQLite database (damaged or replaced); "
        "restore it from a backup"
    )


def _wal_path(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


@contextlib.contextmanager
def storage_faults() -> Iterator[None]:
    """Raise storage faults from SQLite as :class:`~obsmem.errors.StorageError` (other errors unchanged)."""
    try:
        yield
    except apsw.Error as exc:
        fault = storage_fault(exc)
        if fault is None:
            raise
        raise fault from exc


_lock_wait = threading.local()


@contextlib.contextmanager
def lock_wait_bound(until: Callable[[], float | None]) -> Iterator[None]:
    """Within it, this thread's writes wait for the write lock (held by another thread of this process or by
    another process) only until the monotonic time ``until()`` names, then fail with ``storage_busy`` and
    store nothing. ``until`` is asked again at every look at the lock, so another thread may move it earlier
    while a write waits; None: the busy timeout alone. For a caller whose own deadline is shorter than the
    busy timeout (30 s): the pydantic-ai capability's ``close()`` promises to return in its time, and its
    append thread with it."""
    previous = getattr(_lock_wait, "until", None)
    _lock_wait.until = until
    try:
        yield
    finally:
        _lock_wait.until = previous


def _wait_ends(until: Callable[[], float | None], started: float) -> tuple[float, bool]:
    """When a bounded write stops waiting for the lock: its bound, or the busy timeout, whichever is first;
    and whether that is the bound (the storage_busy message says which ended the wait)."""
    bound = until()
    timeout_end = started + BUSY_TIMEOUT_MS / 1000
    if bound is not None and bound < timeout_end:
        return bound, True
    return timeout_end, False


class _BoundedWait:
    """SQLite's busy handler for a bounded write: look again every :data:`LOCK_POLL_SECONDS` until the bound.
    ``bound_ended``: the bound, not the busy timeout, is what made it give up."""

    def __init__(self, until: Callable[[], float | None]) -> None:
        self.until = until
        self.started = time.monotonic()
        self.bound_ended = False

    def __call__(self, _: int) -> bool:
        end, by_bound = _wait_ends(self.until, self.started)
        left = end - time.monotonic()
        if left <= 0:
            self.bound_ended = by_bound
            return False  # SQLITE_BUSY: storage_busy
        time.sleep(min(LOCK_POLL_SECONDS, left))
        return True


class ProjectDatabase:
    """The database file of one project, with a connection per thread and serialised writes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        # Writers in this process queue here rather than spinning in SQLite's busy handler; other
        # processes (a worker, the CLI) still coordinate through the database lock.
        self._write_lock = threading.RLock()
        self._connections: list[apsw.Connection] = []
        self._connections_lock = threading.Lock()

    def connection(self) -> apsw.Connection:
        conn: apsw.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and conn.readonly("main") and self._writable_again(conn):
            self._discard(conn)
            conn = None
        if conn is None:
            conn = open_connection(self.path, create=False)
            self._local.conn = conn
            with self._connections_lock:
                self._connections.append(conn)
        return conn

    def _writable_again(self, conn: apsw.Connection) -> bool:
        """Whether a read-only connection should give way to a fresh one: its directory can be written
        again (a remount), or, for a snapshot, a write-ahead log appeared or the file changed."""
        if conn.in_transaction:
            return False
        if not _read_only_directory(self.path.parent):
            return True
        if not isinstance(conn, SnapshotConnection):
            return False
        return self.wal_path.exists() or file_stamp(self.path) != conn.stamp

    def _discard(self, conn: apsw.Connection) -> None:
        self._local.conn = None
        with self._connections_lock, contextlib.suppress(ValueError):
            self._connections.remove(conn)
        with contextlib.suppress(apsw.Error):
            conn.close()

    @contextlib.contextmanager
    def write(self) -> Iterator[apsw.Connection]:
        """A ``BEGIN IMMEDIATE`` transaction: committed on success, rolled back on any exception.

        A storage fault (disk full, read-only, I/O error, lock timeout, damage) leaves as a
        :class:`~obsmem.errors.StorageError`; the transaction is rolled back, so nothing half-written stays.
        """
        conn = self.connection()
        until: Callable[[], float | None] | None = getattr(_lock_wait, "until", None)
        with self._writer_turn(until), storage_faults():
            if conn.in_transaction:
                # Nested use joins the outer transaction (apsw savepoints would hide the outer BEGIN).
                yield conn
                return
            self._begin_immediate(conn, until)
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    # SQLite may already have rolled back after an I/O error or a full disk.
                    with contextlib.suppress(apsw.Error):
                        conn.execute("ROLLBACK")
                raise
            else:
                try:
                    conn.execute("COMMIT")
                except apsw.Error:
                    if conn.in_transaction:
                        with contextlib.suppress(apsw.Error):
                            conn.execute("ROLLBACK")
                    raise
                self._truncate_large_wal(conn)

    @contextlib.contextmanager
    def _writer_turn(self, until: Callable[[], float | None] | None) -> Iterator[None]:
        """This process's write lock; under a :func:`lock_wait_bound`, waited for only until its bound (a writer
        of this process may itself be waiting out the busy timeout on another process's lock)."""
        if until is None:
            with self._write_lock:
                yield
            return
        started = time.monotonic()
        while not self._write_lock.acquire(timeout=LOCK_POLL_SECONDS):
            end, by_bound = _wait_ends(until, started)
            if time.monotonic() >= end:
                raise busy(bounded=by_bound)
        try:
            yield
        finally:
            self._write_lock.release()

    @staticmethod
    def _begin_immediate(conn: apsw.Connection, until: Callable[[], float | None] | None) -> None:
        if until is None:
            conn.execute("BEGIN IMMEDIATE")
            return
        wait = _BoundedWait(until)
        conn.set_busy_handler(wait)
        try:
            conn.execute("BEGIN IMMEDIATE")
        except apsw.BusyError as exc:
            if wait.bound_ended:
                raise busy(bounded=True) from exc
            raise
        finally:
            conn.set_busy_timeout(BUSY_TIMEOUT_MS)

    @property
    def wal_path(self) -> Path:
        return _wal_path(self.path)

    def wal_bytes(self) -> int:
        """The current size of the write-ahead log (0 when there is none)."""
        try:
            return self.wal_path.stat().st_size
        except FileNotFoundError:
            return 0

    def _truncate_large_wal(self, conn: apsw.Connection) -> None:
        """After a commit that left the log above :data:`WAL_TRUNCATE_BYTES`, checkpoint and truncate it.

        Runs with a short busy timeout: a reader in another process that still needs the old log makes the
        checkpoint stop early (it is tried again after the next large commit) rather than stall this writer.
        The commit is durable already, so a checkpoint that fails (busy, disk full) never fails the write.
        """
        if self.wal_bytes() <= WAL_TRUNCATE_BYTES:
            return
        conn.set_busy_timeout(CHECKPOINT_BUSY_MS)
        try:
            with contextlib.suppress(apsw.Error):
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        finally:
            conn.set_busy_timeout(BUSY_TIMEOUT_MS)

    @contextlib.contextmanager
    def read(self) -> Iterator[apsw.Connection]:
        """A consistent snapshot for several statements (a deferred read transaction)."""
        conn = self.connection()
        if conn.in_transaction:
            yield conn
            return
        with storage_faults():
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")

    def query(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        with storage_faults():
            return self.connection().execute(sql, params).fetchall()

    def close(self) -> None:
        """Close every connection this object opened (all threads); used at shutdown and in tests."""
        with self._connections_lock:
            for conn in self._connections:
                with contextlib.suppress(apsw.Error):
                    conn.close()
            self._connections.clear()
        self._local = threading.local()
