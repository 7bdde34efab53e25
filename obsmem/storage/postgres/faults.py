"""PostgreSQL faults as the ``storage_*`` errors of :mod:`obsmem.errors`.

A message names the kind of failure only: never the DSN (it may hold a password), never a statement's
parameters (they hold memory text).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
from psycopg import errors as pg_errors

from obsmem.errors import NotOnPostgres, StorageBusy, StorageError, StorageFull, StorageReadOnly

# SQLSTATE classes (https://www.postgresql.org/docs/current/errcodes-appendix.html).
_DISK_FULL = "53100"
_READ_ONLY = "25006"


def postgres_fault(exc: BaseException) -> StorageError | None:
    """The storage error a psycopg exception stands for (None: not a storage fault, e.g. a bug in SQL)."""
    if not isinstance(exc, psycopg.Error):
        return None
    state = getattr(exc, "sqlstate", None)
    if state == _DISK_FULL:
        return StorageFull("the PostgreSQL server is out of disk space")
    if state == _READ_ONLY or isinstance(exc, pg_errors.ReadOnlySqlTransaction):
        return StorageReadOnly("the PostgreSQL server accepts no writes (read-only or a standby)")
    if isinstance(exc, (pg_errors.LockNotAvailable, pg_errors.QueryCanceled, pg_errors.DeadlockDetected)):
        return StorageBusy("another writer held a PostgreSQL lock for longer than the timeout")
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return StorageError("the PostgreSQL server cannot be reached or closed the connection")
    return None


@contextlib.contextmanager
def postgres_faults() -> Iterator[None]:
    """Raise storage faults from psycopg as :class:`~obsmem.errors.StorageError` (other errors unchanged).

    PostgreSQL text cannot hold U+0000, which SQLite stores (an event's content may carry one): such a write
    is refused whole as ``not_on_postgres``, rather than stored altered."""
    try:
        yield
    except psycopg.DataError as exc:
        if "NUL" in str(exc):
            raise NotOnPostgres(
                "text holding NUL characters (U+0000) cannot be stored on PostgreSQL yet; nothing was stored"
            ) from None
        raise
    except psycopg.Error as exc:
        fault = postgres_fault(exc)
        if fault is None:
            raise
        raise fault from None
