"""`[storage]`: which database holds the projects (one SQLite file each, or one PostgreSQL database).

The DSN may carry a password, so it is a secret: it is never shown back, and a bad one is described by
what is wrong with it (scheme, host, database name), never echoed.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import parse_qs, urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from obsmem.settings.base import Section

POSTGRES_SCHEMES = ("postgresql", "postgres")


class StorageSettings(Section):
    """`[storage]`: the storage backend and, for PostgreSQL, where its database is."""

    backend: Literal["sqlite", "postgres"] = Field(
        default="sqlite",
        description="`sqlite`: one SQLite file per project under `data_dir`; `postgres`: every project in the "
        "PostgreSQL database `dsn` names (see docs/postgres.md for what it supports today).",
    )
    dsn: SecretStr | None = Field(
        default=None,
        description="`postgres` only: `postgresql://user:password@host:port/database` (a `host=` query names a "
        "Unix socket directory). Never logged or shown.",
    )
    pool_size: int = Field(
        default=8, ge=1, le=256, description="`postgres` only: connections the pool keeps open at most."
    )

    @field_validator("dsn")
    @classmethod
    def _postgres_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        problem = dsn_problem(value.get_secret_value())
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _dsn_for_postgres(self) -> StorageSettings:
        if self.backend == "postgres" and self.dsn is None:
            raise ValueError("backend 'postgres' needs dsn (or OBSMEM_STORAGE__DSN)")
        return self

    def postgres_dsn(self) -> str:
        """The DSN in clear, for the connection pool only."""
        if self.dsn is None:
            raise ValueError("no dsn is set")
        return self.dsn.get_secret_value()


def dsn_problem(dsn: str) -> str | None:
    """What is wrong with a PostgreSQL URL, in words that never repeat it (it may hold a password)."""
    text = dsn.strip()
    if not text:
        return "is blank"
    if any(not char.isprintable() for char in dsn):
        return "must not contain control characters"
    try:
        parts = urlsplit(text)
        query = parse_qs(parts.query)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError:
        return "is not a valid postgresql:// URL"
    if parts.scheme not in POSTGRES_SCHEMES:
        return "must be a postgresql:// URL (postgresql://user:password@host:port/database)"
    if not parts.hostname and "host" not in query:
        return "must name a host (postgresql://user@host/database, or ?host=/socket/directory)"
    if not parts.path.strip("/"):
        return "must name a database (postgresql://user@host/database)"
    if parts.fragment:
        return "must not have a fragment"
    return None
