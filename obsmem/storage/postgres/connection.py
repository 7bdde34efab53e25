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
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from obsmem.storage.postgres.faults import postgres_faults
from obsmem.storage.postgres.sql import to_psycopg

# How long a write waits for another writer of the same project (SQLite's busy timeout is 30 s too).
LOCK_TIMEOUT_MS = 30_000
POOL_WAIT_SECONDS = 30.0
# Closed connections a transaction's first exchange replaces before the fault is the caller's: the pool
# may hold several after a server restart, and it holds at most this many.
MAX_REPLACED_CONNECTIONS = 16
_T = TypeVar("_T")


def project_schema(project: str) -> str:
    """The schema of a project: a fixed prefix and a hash, so any slug (up to 64 characters) fits
    PostgreSQL's 63-byte identifiers and never needs quoting."""
    return "obsmem_p_" + hashlib.sha256(project.encode("utf-8")).hexdigest()[:24]


def advisory_key(project: str) -> int:
    """The project's advisory-lock key: a signed 64-bit integer from its name."""
    digest = hashlib.sha256(b"obsmem-project-lock\x00" + project.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


_INLINE_TYPES = (str, int, float, type(None))


def _inlinable(value: object) -> bool:
    """Whether psycopg's client-side binding renders ``value`` as the server-side binding would type it:
    text, numbers, NULL and lists of text (``?::text[]``); anything else goes as a bound parameter."""
    if isinstance(value, list):
        return all(isinstance(item, str) for item in value)
    return isinstance(value, _INLINE_TYPES)


def _then_commit(raw: psycopg.Connection[Any], cursor: psycopg.Cursor[Any]) -> psycopg.Cursor[Any]:
    raw.execute("COMMIT")
    return cursor


def on_pooled_connection(
    pool: ConnectionPool, first: Callable[[psycopg.Connection[Any]], _T]
) -> tuple[psycopg.Connection[Any], _T]:
    """A connection taken from ``pool`` and the result of ``first`` run on it, for work outside a project's
    transactions (the project list, a session lock). The pool checks no connection it hands out, so a
    connection closed under it (its backend terminated, the server restarted) is found by ``first``: it goes
    back and ``first`` runs again on another, as a transaction's first exchange does. ``first`` must be safe
    to run again (a read, or statements that change nothing when repeated). The caller gives the connection
    back with ``pool.putconn``."""
    attempts = 0
    while True:
        conn = pool.getconn(timeout=POOL_WAIT_SECONDS)
        try:
            return conn, first(conn)
        except BaseException as exc:
            pool.putconn(conn)
            attempts += 1
            if not isinstance(exc, psycopg.Error) or not conn.closed or attempts > MAX_REPLACED_CONNECTIONS:
                raise


def pooled(pool: ConnectionPool, first: Callable[[psycopg.Connection[Any]], _T]) -> _T:
    """The result of ``first`` run on a pooled connection (:func:`on_pooled_connection`), given back at once."""
    conn, result = on_pooled_connection(pool, first)
    pool.putconn(conn)
    return result


class PostgresConnection:
    """One pooled connection inside a transaction, answering the calls the owning modules make of an
    apsw connection (``execute``, ``executemany``, ``in_transaction``) with their SQL translated.

    The transaction's opening statements (``BEGIN``, ``SET LOCAL``, the writer lock) wait for its first
    statement and go with it in one pipeline, one exchange with the server: a search is a few
    milliseconds, of which each exchange is a noticeable share on a busy machine. That first exchange is
    also the check that the pooled connection still works (the pool checks none when it hands one out):
    if the connection turns out closed (the server restarted, its backend was terminated) before
    anything of the transaction reached the server, the statements go again on another connection.
    """

    # Owning modules whose SQL differs between backends branch on this (an apsw connection has none).
    dialect = "postgres"

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        schema: str = "",
        *,
        prelude: Sequence[str] = (),
        replace: Callable[[psycopg.Connection[Any]], psycopg.Connection[Any]] | None = None,
        writing: bool = True,
    ) -> None:
        """``prelude``: the opening statements, sent with the first statement; ``replace``: gives another
        connection for a closed one (None: a closed connection is a fault at once); ``writing``: False for a
        read-only snapshot, whose statements may each go alone (``execute_alone``)."""
        self._raw = conn
        self._held: psycopg.Connection[Any] | None = conn
        self.schema = schema  # the project's schema, which search_path names (a key for per-project caches)
        self._changes = 0
        self._prelude = list(prelude)
        self._replace = replace
        self._writing = writing

    @property
    def raw(self) -> psycopg.Connection[Any]:
        """The psycopg connection, its transaction opened (for COPY and statements the SQL translation
        must not touch)."""
        self._send_prelude()
        return self._raw

    @property
    def pgconn(self) -> psycopg.pq.abc.PGconn:
        """libpq's connection (host, port, database), without opening the transaction."""
        return self._raw.pgconn

    @property
    def held(self) -> psycopg.Connection[Any] | None:
        """The psycopg connection the transaction holds now, the pool's to take back at its end (None: a
        closed one was given back and no other could be had)."""
        return self._held

    @property
    def began(self) -> bool:
        """Whether the transaction reached the server (False: no statement was run, nothing to end)."""
        return not self._prelude

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        if self._prelude and all(_inlinable(value) for value in params):
            # One query string, the values bound by psycopg in the client: the cheapest single exchange
            # (a pipeline costs the client about as much as the exchange it saves).
            cursor = self._first_exchange(lambda raw: self._with_prelude(raw, sql, params), pipelined=False)
        else:
            cursor = self._first_exchange(lambda raw: raw.execute(to_psycopg(sql), tuple(params)))
        self._changes = max(cursor.rowcount, 0)
        return cursor

    def execute_alone(
        self, sql: str, params: Sequence[Any] = (), *, prepare: bool = False, qualified: bool = False
    ) -> psycopg.Cursor[Any]:
        """``execute`` for a read whose statement needs no snapshot shared with the others (an exact search's
        statements: each answers on its own). Before the transaction began, the statement goes in its own
        transaction, opened and committed in the same query string: one exchange, nothing left to end.
        Inside a begun transaction (or a write) it is ``execute``. ``prepare``: a statement whose planning
        costs more than a pipeline does (psycopg prepares a statement run often, and the server keeps its
        plan): the statement goes bound and the transaction's statements in one pipeline, still one exchange;
        otherwise the values are bound in the client (each such statement is planned anew).

        ``qualified``: the statement names the project's schema itself (``schema.table``), so it needs
        neither the transaction's ``search_path`` nor its ``BEGIN``: it goes alone, a single statement on the
        pool's autocommit connection being a transaction and a snapshot of its own. Prepared, that is one
        bound statement without a pipeline (0.1 ms of the client's CPU time less per search)."""
        if not self._prelude or self._writing:
            return self.execute(sql, params)
        if qualified and (prepare or all(_inlinable(value) for value in params)):
            return self._alone(sql, params, prepare=prepare)
        if not all(_inlinable(value) for value in params):
            return self.execute(sql, params)
        prelude = self._prelude
        if prepare:
            cursor = self._first_exchange(lambda raw: _then_commit(raw, raw.execute(to_psycopg(sql), tuple(params))))
        else:
            cursor = self._first_exchange(
                lambda raw: self._with_prelude(raw, sql, params, end="COMMIT"), pipelined=False
            )
        self._prelude = prelude  # committed: the next statement opens the transaction again
        self._changes = 0
        return cursor

    def execute_batch(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[tuple[Any, ...]]]:
        """Several reads in one pipeline: one exchange with the server (the transaction's opening included,
        if it has not begun) where a statement each would cost one each; returns each statement's rows. Each
        statement goes bound and prepared, so the server plans it once per connection: the validation's
        joins cost several milliseconds to plan, more than the pipeline costs the client."""
        if not statements:
            return []

        def exchange(raw: psycopg.Connection[Any]) -> list[list[tuple[Any, ...]]]:
            cursors = []
            with raw.pipeline():
                for sql, params in statements:
                    cursor = raw.cursor()
                    cursor.execute(to_psycopg(sql), tuple(params), prepare=True)
                    cursors.append(cursor)
            return [cursor.fetchall() for cursor in cursors]

        results = self._first_exchange(exchange)
        self._changes = 0
        return results

    def _alone(self, sql: str, params: Sequence[Any], *, prepare: bool) -> psycopg.Cursor[Any]:
        """One statement by itself, outside the transaction, which is left unopened (nothing to end)."""
        prelude = self._prelude
        try:
            if prepare:
                cursor = self._first_exchange(
                    lambda raw: raw.execute(to_psycopg(sql), tuple(params), prepare=True), pipelined=False
                )
            else:
                cursor = self._first_exchange(
                    lambda raw: psycopg.ClientCursor(raw).execute(to_psycopg(sql), tuple(params)), pipelined=False
                )
        finally:
            # Nothing was opened, whatever the statement did: the next statement opens the transaction, and
            # a failed one leaves no transaction to roll back.
            self._prelude = prelude
        self._changes = 0
        return cursor

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> psycopg.Cursor[Any]:
        self._send_prelude()
        cursor = self._raw.cursor()
        cursor.executemany(to_psycopg(sql), [tuple(row) for row in rows])
        self._changes = max(cursor.rowcount, 0)
        return cursor

    def _send_prelude(self) -> None:
        if self._prelude:
            self._first_exchange(lambda raw: raw.execute("; ".join(self._prelude)), pipelined=False)

    def _with_prelude(
        self, raw: psycopg.Connection[Any], sql: str, params: Sequence[Any], *, end: str = ""
    ) -> psycopg.Cursor[Any]:
        """The prelude, the statement (and ``end``) in one query string; the cursor is left on the
        statement's rows."""
        cursor = psycopg.ClientCursor(raw)
        cursor.execute("; ".join([*self._prelude, to_psycopg(sql), *([end] if end else [])]), tuple(params))
        for _ in self._prelude:
            cursor.nextset()
        return cursor

    def _first_exchange(self, statement: Callable[[psycopg.Connection[Any]], _T], *, pipelined: bool = True) -> _T:
        """Run ``statement``, after the prelude in the same pipeline when the transaction has not begun.
        Nothing commits before the transaction's end, so a first exchange lost with its connection is
        sent again whole, on another connection (as many times as the pool may hold dead ones)."""
        if not self._prelude:
            return statement(self._raw)
        attempts = 0
        while True:
            try:
                if pipelined:
                    with self._raw.pipeline():
                        for sql in self._prelude:
                            self._raw.execute(sql)
                        result = statement(self._raw)
                else:
                    result = statement(self._raw)
                self._prelude = []
                return result
            except psycopg.Error:
                attempts += 1
                if not self._raw.closed:
                    self._prelude = []  # the server may have begun the transaction: its end must roll it back
                    raise
                if self._replace is None or attempts > MAX_REPLACED_CONNECTIONS:
                    raise
                self._held = None  # given back to the pool by the replacement, whether or not another comes
                self._raw = self._replace(self._raw)
                self._held = self._raw

    def changes(self) -> int:
        """Rows the last statement changed (apsw's ``changes()``)."""
        return self._changes

    @property
    def in_transaction(self) -> bool:
        # A transaction whose opening waits for its first statement is open all the same.
        return bool(self._prelude) or self._raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE


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
        # Statements without values (the lock's key is an integer of ours), so that they can lead any query string.
        prelude = [begin, f"SET LOCAL search_path TO {self.schema}, public"]
        if writing:
            prelude.append(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}")
        if lock:
            prelude.append(f"SELECT pg_advisory_xact_lock({int(self.lock_key)})")
        with postgres_faults():
            conn = PostgresConnection(
                self._pool.getconn(timeout=POOL_WAIT_SECONDS),
                self.schema,
                prelude=prelude,
                replace=self._replace,
                writing=writing,
            )
            self._local.conn = conn
            self._local.writing = writing
            try:
                yield conn
                if conn.began:
                    conn.raw.execute("COMMIT")
            except BaseException:
                if conn.began:
                    with contextlib.suppress(psycopg.Error):
                        conn.raw.execute("ROLLBACK")
                raise
            finally:
                self._local.conn = None
                if conn.held is not None:
                    self._pool.putconn(conn.held)

    def _replace(self, closed: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
        """Another connection for one found closed: the pool discards the closed one and reconnects."""
        self._pool.putconn(closed)
        return self._pool.getconn(timeout=POOL_WAIT_SECONDS)

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
        with postgres_faults():
            raw, row = on_pooled_connection(  # autocommit connections
                self._pool, lambda conn: conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
            )
            taken = bool(row and row[0])
            try:
                yield taken
            finally:
                try:
                    if taken:
                        try:
                            raw.execute("SELECT pg_advisory_unlock(%s)", (key,))
                        except psycopg.Error:
                            # The lock lives as long as the session: a connection closed under the block (its
                            # backend terminated) took it along, and any other is closed so that it does.
                            raw.close()
                finally:
                    self._pool.putconn(raw)

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
