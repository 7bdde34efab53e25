"""A throwaway database beside the configured one, for work that must not touch real projects (evaluation).

On SQLite the eval harness loads its datasets into a temporary data directory; on PostgreSQL the
counterpart is a temporary database on the same server: created from the configured DSN (its user needs
``CREATEDB``), given the extensions obsmem needs, and dropped at the end, whatever happened. Project names
of the datasets then never meet the projects of the configured database.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg

from obsmem.errors import StorageError
from obsmem.storage.postgres.faults import postgres_faults

EXTENSIONS = ("pg_trgm", "vector")


def with_database(dsn: str, database: str) -> str:
    """``dsn`` naming another database (user, password, host and query kept)."""
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, parts.fragment))


@contextlib.contextmanager
def scratch_database(dsn: str) -> Iterator[str]:
    """A new, empty database on ``dsn``'s server for the block; yields its DSN and drops it afterwards."""
    name = "obsmem_scratch_" + secrets.token_hex(6)
    with postgres_faults():
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {name}")
        except psycopg.errors.InsufficientPrivilege:
            raise StorageError(
                "evaluation on PostgreSQL runs in a temporary database, and this user may not create one (CREATEDB)"
            ) from None
    try:
        scratch = with_database(dsn, name)
        with postgres_faults(), psycopg.connect(scratch, autocommit=True) as conn:
            for extension in EXTENSIONS:
                conn.execute(f"CREATE EXTENSION IF NOT EXISTS {extension}")
        yield scratch
    finally:
        with postgres_faults(), psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
