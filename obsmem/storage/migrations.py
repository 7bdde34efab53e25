"""Versioned, checksummed schema migrations.

Each migration is applied once, inside its own ``BEGIN IMMEDIATE`` transaction, and recorded with the
SHA-256 of its SQL. Opening a database whose recorded checksum differs from the code's refuses to go on:
an edited migration would leave databases that disagree about their own schema.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import apsw

from obsmem.errors import StorageError
from obsmem.storage.schema import (
    m0001_core,
    m0002_pipeline,
    m0003_semantic,
    m0004_generations,
    m0005_imports,
    m0006_conversation,
    m0007_notes,
)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


# Versions may have gaps: each is reserved for one part of the project (2 = pipeline I, 3 = semantic
# index, 4 = pipeline II, 5 = transcript imports, 6 = conversation search, 7 = notes and trust) and they are
# applied in increasing order of what is missing.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, m0001_core.NAME, m0001_core.SQL),
    Migration(2, m0002_pipeline.NAME, m0002_pipeline.SQL),
    Migration(3, m0003_semantic.NAME, m0003_semantic.SQL),
    Migration(4, m0004_generations.NAME, m0004_generations.SQL),
    Migration(5, m0005_imports.NAME, m0005_imports.SQL),
    Migration(6, m0006_conversation.NAME, m0006_conversation.SQL),
    Migration(7, m0007_notes.NAME, m0007_notes.SQL),
)

_LEDGER = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    checksum TEXT NOT NULL,
    applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
)
"""


def applied_migrations(conn: apsw.Connection) -> dict[int, tuple[str, str]]:
    rows = conn.execute("SELECT version, name, checksum FROM schema_migrations").fetchall()
    return {version: (name, checksum) for version, name, checksum in rows}


def migrate(conn: apsw.Connection, migrations: tuple[Migration, ...] = MIGRATIONS) -> list[int]:
    """Apply what is missing; verify what was applied. Returns the versions applied now."""
    versions = [m.version for m in migrations]
    if versions != sorted(set(versions)):
        raise StorageError("migrations must have unique, increasing versions")
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(_LEDGER)
        applied = applied_migrations(conn)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    known = {m.version for m in migrations}
    newer = sorted(v for v in applied if v not in known)
    if newer:
        raise StorageError(f"database schema version {newer[-1]} is newer than this obsmem understands; upgrade obsmem")
    done: list[int] = []
    for migration in migrations:
        if migration.version in applied:
            _, checksum = applied[migration.version]
            if checksum != migration.checksum:
                raise StorageError(
                    f"migration {migration.version} ({migration.name}) differs from the one applied to "
                    "this database; applied migrations must never be edited"
                )
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Another process may have applied it while we waited for the lock.
            if conn.execute("SELECT 1 FROM schema_migrations WHERE version = ?", (migration.version,)).fetchall():
                conn.execute("COMMIT")
                continue
            conn.execute(migration.sql)
            conn.execute(
                "INSERT INTO schema_migrations(version, name, checksum) VALUES (?, ?, ?)",
                (migration.version, migration.name, migration.checksum),
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        done.append(migration.version)
    return done
