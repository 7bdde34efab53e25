"""Versioned, checksummed migrations of a project's PostgreSQL schema.

As on SQLite (:mod:`obsmem.storage.migrations`): each migration is recorded in the schema's
``schema_migrations`` table with the SHA-256 of its SQL; a recorded checksum that differs from the code's,
or a version this code does not know, refuses to go on. PostgreSQL's DDL is transactional, so a project's
schema, its migrations and its row in the project list commit together: a project appears migrated and
complete, or not at all. Versions are PostgreSQL's own (the SQLite set has other tables to migrate). They
may have gaps: each is reserved for one part of the backend, and what is missing is applied in increasing
order, so a schema that has 6 still gets a 4 or 5 added later.
"""

from __future__ import annotations

from obsmem.errors import StorageError
from obsmem.storage.migrations import Migration
from obsmem.storage.postgres.connection import PostgresConnection
from obsmem.storage.postgres.schema import (
    p0001_core,
    p0002_work,
    p0003_conversation,
    p0004_semantic,
    p0005_pipeline,
    p0006_notes_imports,
    p0007_short_needles,
    p0010_event_markers,
    p0011_word_joins,
    p0012_covering_postings,
)

POSTGRES_MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, p0001_core.NAME, p0001_core.SQL),
    Migration(2, p0002_work.NAME, p0002_work.SQL),
    Migration(3, p0003_conversation.NAME, p0003_conversation.SQL),
    # Versions need not be contiguous: each one a schema lacks is applied, in order of version.
    Migration(4, p0004_semantic.NAME, p0004_semantic.SQL),
    Migration(5, p0005_pipeline.NAME, p0005_pipeline.SQL),
    Migration(6, p0006_notes_imports.NAME, p0006_notes_imports.SQL),
    Migration(7, p0007_short_needles.NAME, p0007_short_needles.SQL),
    Migration(10, p0010_event_markers.NAME, p0010_event_markers.SQL),
    Migration(11, p0011_word_joins.NAME, p0011_word_joins.SQL),
    Migration(12, p0012_covering_postings.NAME, p0012_covering_postings.SQL),
)

_LEDGER = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    checksum TEXT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)
"""


def migrate_schema(conn: PostgresConnection, migrations: tuple[Migration, ...] = POSTGRES_MIGRATIONS) -> list[int]:
    """Apply what is missing to the schema ``search_path`` names, inside the caller's write transaction
    (which holds the project's lock); verify what was applied. Returns the versions applied now."""
    versions = [m.version for m in migrations]
    if versions != sorted(set(versions)):
        raise StorageError("migrations must have unique, increasing versions")
    conn.execute(_LEDGER)
    applied = {
        int(version): (name, checksum)
        for version, name, checksum in conn.execute("SELECT version, name, checksum FROM schema_migrations")
    }
    known = set(versions)
    newer = sorted(v for v in applied if v not in known)
    if newer:
        raise StorageError(f"database schema version {newer[-1]} is newer than this obsmem understands; upgrade obsmem")
    done: list[int] = []
    for migration in migrations:
        if migration.version in applied:
            if applied[migration.version][1] != migration.checksum:
                raise StorageError(
                    f"migration {migration.version} ({migration.name}) differs from the one applied to "
                    "this database; applied migrations must never be edited"
                )
            continue
        conn.raw.execute(migration.sql)
        conn.execute(
            "INSERT INTO schema_migrations(version, name, checksum) VALUES (?, ?, ?)",
            (migration.version, migration.name, migration.checksum),
        )
        done.append(migration.version)
    return done
