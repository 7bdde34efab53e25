"""Every project in one PostgreSQL database: the connection pool, the project list, the extensions.

:class:`PostgresStore` is to PostgreSQL what :class:`obsmem.projects.ProjectRegistry` is to the data
directory: it opens a project (``get``), creates it on a first write (``create=True``; a read of an unknown
project is ``project_not_found``), and lists the projects. The list is the table ``obsmem.projects``
(name, schema); each project's tables live in its own schema (:func:`project_schema`).
"""

from __future__ import annotations

import threading

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from obsmem.errors import ProjectNotFound, StorageError
from obsmem.storage.postgres.connection import PostgresConnection, PostgresProjectDatabase, advisory_key, pooled
from obsmem.storage.postgres.faults import postgres_faults
from obsmem.storage.postgres.migrations import migrate_schema
from obsmem.storage.postgres.notify import EventSignal
from obsmem.storage.postgres.users import PostgresUserTiers
from obsmem.validation import project_name

CONNECT_SECONDS = 15.0
# The extensions the backend needs: pg_trgm for exact search, pgvector (``vector``) for hybrid search's embeddings.
REQUIRED_EXTENSIONS = ("pg_trgm", "vector")
_CATALOG_LOCK = advisory_key("\x00catalog")
_CATALOG = """
CREATE SCHEMA IF NOT EXISTS obsmem;
CREATE TABLE IF NOT EXISTS obsmem.projects (
    name TEXT PRIMARY KEY,
    schema_name TEXT NOT NULL UNIQUE,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
"""


class PostgresStore:
    """One pool of connections to one database, and the projects in it."""

    def __init__(self, dsn: str, *, pool_size: int = 8, connect_seconds: float = CONNECT_SECONDS) -> None:
        self.dsn = dsn  # kept for maintenance connections outside the pool; never shown
        self._pool = ConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True},
            # No check when a connection is handed out (it cost every transaction one more exchange with the
            # server): a transaction's first exchange finds a closed connection and takes another one
            # (PostgresConnection).
            open=False,
            name="obsmem",
        )
        try:
            self._pool.open(wait=True, timeout=connect_seconds)
        except PoolTimeout:
            self._pool.close()
            # The pool's own message may carry the server's reply; the DSN (and its password) stays out.
            raise StorageError(
                f"cannot connect to the PostgreSQL database of storage.dsn within {connect_seconds:g} s"
            ) from None
        self._open: dict[str, PostgresProjectDatabase] = {}
        self._lock = threading.Lock()
        self._signal: EventSignal | None = None
        self._users: PostgresUserTiers | None = None
        try:
            self._prepare_catalog()
        except BaseException:
            self._pool.close()
            raise

    def _prepare_catalog(self) -> None:
        with postgres_faults(), self._pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_CATALOG_LOCK,))
            installed = {row[0] for row in conn.execute("SELECT extname FROM pg_extension")}
            for extension in REQUIRED_EXTENSIONS:
                if extension in installed:
                    continue
                try:
                    with conn.transaction():
                        conn.execute(f"CREATE EXTENSION IF NOT EXISTS {extension}")
                except psycopg.errors.InsufficientPrivilege:
                    raise StorageError(
                        f"the PostgreSQL database lacks the {extension} extension and this user may not create "
                        f"it; run CREATE EXTENSION {extension} as the database owner"
                    ) from None
                except psycopg.errors.UndefinedFile:
                    raise StorageError(
                        f"the PostgreSQL server has no {extension} extension installed (see docs/postgres.md)"
                    ) from None
            conn.execute(_CATALOG)

    def exists(self, project: str) -> bool:
        name = project_name(project)
        with postgres_faults():
            row = pooled(
                self._pool,
                lambda conn: conn.execute("SELECT 1 FROM obsmem.projects WHERE name = %s", (name,)).fetchone(),
            )
        return row is not None

    def names(self) -> list[str]:
        with postgres_faults():
            rows = pooled(
                self._pool,
                lambda conn: conn.execute('SELECT name FROM obsmem.projects ORDER BY name COLLATE "C"').fetchall(),
            )
        return [row[0] for row in rows]

    def get(self, project: str, *, create: bool = False) -> PostgresProjectDatabase:
        """The project's database; ``create=True`` makes it on first use (writes only). Opening applies
        the migrations it lacks, under the project's writer lock."""
        name = project_name(project)
        with self._lock:
            db = self._open.get(name)
            if db is not None:
                return db
            db = PostgresProjectDatabase(self._pool, name)
            with db.write() as conn:
                known = conn.execute("SELECT schema_name FROM obsmem.projects WHERE name = ?", (name,)).fetchone()
                if known is None:
                    if not create:
                        raise ProjectNotFound(f"project '{name}' does not exist", field="project")
                    conn.execute(f"CREATE SCHEMA {db.schema}")
                    conn.execute("INSERT INTO obsmem.projects(name, schema_name) VALUES (?, ?)", (name, db.schema))
                migrate_schema(conn)
            self._open[name] = db
            return db

    def drop(self, project: str) -> bool:
        """Delete a project and everything in it (its schema and its listing) in one transaction, under its
        writer lock; False when it did not exist. Only ``obsmem migrate --replace`` asks for this."""
        name = project_name(project)
        db = PostgresProjectDatabase(self._pool, name)
        with db.write() as conn:
            known = conn.execute("SELECT 1 FROM obsmem.projects WHERE name = ?", (name,)).fetchone()
            conn.execute(f"DROP SCHEMA IF EXISTS {db.schema} CASCADE")
            conn.execute("DELETE FROM obsmem.projects WHERE name = ?", (name,))
        self.release(name)
        return known is not None

    def reset_schema(self, conn: PostgresConnection) -> None:
        """Empty the project whose write transaction ``conn`` is: its schema is dropped and made again at the
        current migration, inside that transaction, so a restore that follows replaces the project whole or
        (rolled back) not at all."""
        conn.execute(f"DROP SCHEMA {conn.schema} CASCADE")
        conn.execute(f"CREATE SCHEMA {conn.schema}")
        migrate_schema(conn)

    def user_tiers(self) -> PostgresUserTiers:
        """The user tiers' databases in this database (their own schemas, listed apart from projects)."""
        with self._lock:
            if self._users is None:
                self._users = PostgresUserTiers(self._pool)
            return self._users

    def release(self, project: str) -> None:
        with self._lock:
            self._open.pop(project, None)

    def event_signal(self) -> EventSignal:
        """The store's one listening connection for event followers, opened by the first follower (a store
        that nobody follows holds none); a listener whose connection broke is replaced."""
        with self._lock:
            if self._signal is None or not self._signal.listening:
                if self._signal is not None:
                    self._signal.close()
                with postgres_faults():
                    self._signal = EventSignal(self.dsn)
            return self._signal

    def close(self) -> None:
        with self._lock:
            self._open.clear()
            signal, self._signal = self._signal, None
        if signal is not None:
            signal.close()
        self._pool.close()
