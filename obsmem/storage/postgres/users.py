"""User tiers on PostgreSQL: each owner's notes in a schema of its own, in the projects' database.

On SQLite a user tier is a database file of its own (``<data_dir>/users/<owner>/obsmem.db``) with the
projects' schema. Here it is a schema of the one database, ``obsmem_u_`` and 24 hex characters of the
SHA-256 of the owner, holding the same migrated tables (only the notes, judgments and ledger are used),
and listed with its owner in ``obsmem.user_tiers``, apart from ``obsmem.projects``: a user tier is never a
project, and an owner may have the name of a project. Every server on the database reads the same tiers.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from obsmem.errors import ProjectNotFound
from obsmem.storage.postgres.connection import PostgresProjectDatabase, advisory_key, pooled
from obsmem.storage.postgres.faults import postgres_faults
from obsmem.storage.postgres.migrations import migrate_schema
from obsmem.validation import project_name

_CATALOG = """
CREATE TABLE IF NOT EXISTS obsmem.user_tiers (
    owner TEXT PRIMARY KEY,
    schema_name TEXT NOT NULL UNIQUE,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
)
"""


def user_schema(owner: str) -> str:
    """The schema of an owner's user tier (a hash, so any owner slug fits and never needs quoting)."""
    return "obsmem_u_" + hashlib.sha256(owner.encode("utf-8")).hexdigest()[:24]


def user_lock_key(owner: str) -> int:
    """The advisory-lock key of a user tier's writers, apart from every project's."""
    digest = hashlib.sha256(b"obsmem-user-lock\x00" + owner.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresUserTiers:
    """The user tiers' databases, with the calls the trust floor makes of SQLite's ``UserRegistry``."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        self._open: dict[str, PostgresProjectDatabase] = {}
        self._lock = threading.Lock()
        self._catalog_ready = False

    def _catalog(self) -> None:
        if self._catalog_ready:
            return

        def create(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction():  # repeatable: the table is made if it is missing
                # The store's catalog lock: two servers creating the list at once would otherwise collide.
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_key("\x00catalog"),))
                conn.execute(_CATALOG)

        with postgres_faults():
            pooled(self._pool, create)
        self._catalog_ready = True

    def exists(self, owner: str) -> bool:
        self._catalog()
        name = project_name(owner)
        with postgres_faults():
            row = pooled(
                self._pool,
                lambda conn: conn.execute("SELECT 1 FROM obsmem.user_tiers WHERE owner = %s", (name,)).fetchone(),
            )
        return row is not None

    def names(self) -> list[str]:
        self._catalog()
        with postgres_faults():
            rows = pooled(
                self._pool,
                lambda conn: conn.execute('SELECT owner FROM obsmem.user_tiers ORDER BY owner COLLATE "C"').fetchall(),
            )
        return [row[0] for row in rows]

    def get(self, owner: str, *, create: bool = False) -> PostgresProjectDatabase:
        """The owner's tier; ``create=True`` makes it (schema, migrations and listing in one transaction)."""
        name = project_name(owner)
        self._catalog()
        with self._lock:
            db = self._open.get(name)
            if db is not None:
                return db
            db = PostgresProjectDatabase(self._pool, name, schema=user_schema(name), lock_key=user_lock_key(name))
            with db.write() as conn:
                known = conn.execute("SELECT 1 FROM obsmem.user_tiers WHERE owner = ?", (name,)).fetchone()
                if known is None:
                    if not create:
                        raise ProjectNotFound(f"user tier '{name}' does not exist", field="user")
                    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {db.schema}")
                    conn.execute("INSERT INTO obsmem.user_tiers(owner, schema_name) VALUES (?, ?)", (name, db.schema))
                migrate_schema(conn)
            self._open[name] = db
            return db

    def release(self, owner: str) -> None:
        """Forget one open tier (as the store forgets a project); its next use opens, and checks, it again."""
        with self._lock:
            self._open.pop(owner, None)

    def close(self) -> None:
        """Forget the open tiers; their connections belong to the store's pool."""
        with self._lock:
            self._open.clear()
