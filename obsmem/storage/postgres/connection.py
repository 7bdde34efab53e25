"""A project's tables in PostgreSQL, with the transaction API of :class:`obsmem.storage.ProjectDatabase`.

Every project lives in its own schema of the one database (``obsmem_p_<hash of the name>``), so the
owning modules' SQL runs unchanged with unqualified table names: each transaction sets ``search_path``
to the project's schema first. The guarantees SQLite gives through its file lock are given here by:

- **write**: one writer per project. ``BEGIN`` (read committed), then ``pg_advisory_xact_lock`` on the
  project's key, released by the commit or rollback. Writers of one project queue on that lock as
  SQLite writers queue on ``BEGIN IMMEDIATE``, and each statement after it sees every earlier writer's
  commit, so a read-then-write (the next seq of a session) is never based on a stale value.
- **read**: one snapshot for several statements, ``BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY``.

Connections come from one psycopg pool shared by every project (:class:`PostgresStore`); a transaction
holds one connection from start to end, and a nested ``write()`` or ``read()`` on the same thread joins it.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from obsmem.storage.postgres.faults import postgres_faults
from obsmem.storage.postgres.sql import to_psycopg

# How long a write waits for another writer of the same project (SQLite's busy timeout is 30 s too).
LOCK_TIMEOUT_MS = 30_000
POOL_WAIT_SECONDS = 30.0


def project_schema(project: str) -> str:
    """The schema of a project: a fixed prefix and a hash, so any slug (up to 64 characters) fits
    PostgreSQL's 63-byte identifiers and never needs quoting."""
    return "obsmem_p_" + hashlib.sha256(project.encode("utf-8")).hexdigest()[:24]


def advisory_key(project: str) -> int:
    """The project's advisory-lock key: a signed 64-bit integer from its name."""
    digest = hashlib.sha256(b"obsmem-project-lock\x00" + project.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresConnection:
    """One pooled connection inside a transaction, answering the calls the owning modules make of an
    apsw connection (``execute``, ``executemany``, ``in_transaction``) with their SQL translated."""

    # Owning modules whose SQL differs between backends branch on this (an apsw connection has none).
    dialect = "postgres"

    def __init__(self, conn: psycopg.Connection[Any], schema: str = "") -> None:
        self.raw = conn
        self.schema = schema  # the project's schema, which search_path names (a key for per-project caches)
        self._changes = 0

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        cursor = self.raw.execute(to_psycopg(sql), tuple(params))
        self._changes = max(cursor.rowcount, 0)
        return cursor

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> psycopg.Cursor[Any]:
        cursor = self.raw.cursor()
        cursor.executemany(to_psycopg(sql), [tuple(row) for row in rows])
        self._changes = max(cursor.rowcount, 0)
        return cursor

    def changes(self) -> int:
        """Rows the last statement changed (apsw's ``changes()``)."""
        return self._changes

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE


class PostgresProjectDatabase:
    """One project's schema: ``write()`` and ``read()`` transactions, as :class:`ProjectDatabase` has."""

    # ``storage.sql_dialect`` reads this, so the job queue can claim with row locks here.
    dialect = "postgres"

    def __init__(
        self, pool: ConnectionPool, project: str, *, schema: str | None = None, lock_key: int | None = None
    ) -> None:
        """``schema`` and ``lock_key`` default to the project's; a user tier's database gives its own."""
        self.project = project
        self.schema = project_schema(project) if schema is None else schema
        self.lock_key = advisory_key(project) if lock_key is None else lock_key
        self._pool = pool
        self._local = threading.local()

    @contextlib.contextmanager
    def _transaction(self, begin: str, *, lock: bool, writing: bool | None = None) -> Iterator[PostgresConnection]:
        writing = lock if writing is None else writing
        current: PostgresConnection | None = getattr(self._local, "conn", None)
        if current is not None:
            if writing and not getattr(self._local, "writing", False):
                # SQLite would upgrade the read; a read-only snapshot cannot, and must not fail later as if
                # the server refused writes.
                raise RuntimeError("a write cannot be opened inside a read snapshot of the same project")
            yield current  # nested use joins the outer transaction
            return
        with postgres_faults(), self._pool.connection(timeout=POOL_WAIT_SECONDS) as raw:
            conn = PostgresConnection(raw, self.schema)
            self._local.conn = conn
            self._local.writing = writing
            try:
                # One round trip (several statements, no parameters): a search is a few milliseconds, of
                # which each exchange with the server is a noticeable share.
                prelude = [begin, f"SET LOCAL search_path TO {self.schema}, public"]
                if writing:
                    prelude.append(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}")
                raw.execute("; ".join(prelude))
                if lock:
                    raw.execute("SELECT pg_advisory_xact_lock(%s)", (self.lock_key,))
                yield conn
            except BaseException:
                self._local.conn = None
                with contextlib.suppress(psycopg.Error):
                    raw.execute("ROLLBACK")
                raise
            self._local.conn = None
            raw.execute("COMMIT")

    @contextlib.contextmanager
    def write(self) -> Iterator[PostgresConnection]:
        """A transaction holding the project's writer lock: committed on success, rolled back on any
        exception. Faults leave as :class:`~obsmem.errors.StorageError`."""
        with self._transaction("BEGIN", lock=True) as conn:
            yield conn

    @contextlib.contextmanager
    def row_locked_write(self) -> Iterator[PostgresConnection]:
        """A write transaction *without* the project's writer lock, for statements that lock the rows they
        change themselves (``FOR UPDATE SKIP LOCKED`` job claims): several run at once. Inside an open
        ``write()`` on the same thread it joins that one, lock included."""
        with self._transaction("BEGIN", lock=False, writing=True) as conn:
            yield conn

    @contextlib.contextmanager
    def read(self) -> Iterator[PostgresConnection]:
        """One consistent snapshot for several statements (read only)."""
        with self._transaction("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", lock=False) as conn:
            yield conn

    @contextlib.contextmanager
    def session_lock(self, purpose: str) -> Iterator[bool]:
        """Try, without waiting, to hold the project's ``purpose`` lock (a session-level advisory lock on a
        connection of its own) for the block; yields whether it was taken. Work that spans several
        transactions (an indexing batch) is serialised by it across processes and servers, as a lock file
        serialises it on SQLite; the server releases it when the connection ends, even if the process dies."""
        key = advisory_key(f"{self.project}\x00{purpose}")  # a project name holds no NUL: no clash
        with postgres_faults(), self._pool.connection(timeout=POOL_WAIT_SECONDS) as raw:
            row = raw.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()  # autocommit connections
            taken = bool(row and row[0])
            try:
                yield taken
            finally:
                if taken:
                    raw.execute("SELECT pg_advisory_unlock(%s)", (key,))

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.read() as conn:
            return conn.execute(sql, params).fetchall()

    def connection(self) -> StatementRunner:
        """What :meth:`ProjectDatabase.connection` gives outside a transaction: each statement on its own
        (a read in a snapshot, anything else as a write under the lock); inside one, the transaction's."""
        return StatementRunner(self)


class StatementRunner:
    """Runs each statement in its own transaction, joining the thread's open one if there is one."""

    dialect = "postgres"

    def __init__(self, db: PostgresProjectDatabase) -> None:
        self._db = db
        self._changes = 0

    def execute(self, sql: str, params: Sequence[Any] = ()) -> RowsCursor:
        reads = sql.lstrip()[:6].upper() == "SELECT"
        with self._db.read() if reads else self._db.write() as conn:
            cursor = conn.execute(sql, params)
            rows = cursor.fetchall() if cursor.description is not None else []
            self._changes = conn.changes()
        return RowsCursor(rows)

    def changes(self) -> int:
        return self._changes


class RowsCursor:
    """The rows of a finished statement, read like a cursor."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self._rows = rows
        self._next = 0

    def fetchone(self) -> tuple[Any, ...] | None:
        if self._next >= len(self._rows):
            return None
        self._next += 1
        return self._rows[self._next - 1]

    def fetchall(self) -> list[tuple[Any, ...]]:
        rest, self._next = self._rows[self._next :], len(self._rows)
        return rest

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.fetchall())

    def close(self) -> None:
        """Nothing to close per project: the connections belong to the store's pool."""
