"""Storage: connections, migrations and the schema of a project database.

The names below are what the rest of the code may import: :class:`ProjectDatabase` (one writer and one
reader per thread over a project's SQLite file; ``lock_wait_bound`` shortens how long a thread's writes
wait for its lock), the start-up capability check, the migration runner, and
the mapping of SQLite and OS faults to the ``storage_*`` errors of :mod:`obsmem.errors`; and the
PostgreSQL backend (:class:`PostgresStore`, :class:`PostgresProjectDatabase`), loaded only when one of its
names is used; and how its exact-search indexes key text (``WORD_JOIN_MAX_GAP``), which the searcher must
agree with. The modules inside are internal and may move.
"""

from typing import TYPE_CHECKING, Any

from obsmem.storage.connection import (
    ProjectDatabase,
    byte_order,
    check_sqlite_capabilities,
    lock_wait_bound,
    open_connection,
    sql_dialect,
    storage_faults,
)
from obsmem.storage.faults import storage_fault
from obsmem.storage.migrations import migrate
from obsmem.storage.text_keys import WORD_JOIN_MAX_GAP

if TYPE_CHECKING:
    from obsmem.storage.postgres import (
        EventSignal,
        PostgresConnection,
        PostgresProjectDatabase,
        PostgresStore,
        index_statements,
        scratch_database,
    )

# The PostgreSQL backend needs psycopg (the ``postgres`` extra): loaded on first use, never by SQLite users.
_POSTGRES_NAMES = (
    "EventSignal",
    "PostgresConnection",
    "PostgresProjectDatabase",
    "PostgresStore",
    "index_statements",
    "scratch_database",
)


def __getattr__(name: str) -> Any:
    if name in _POSTGRES_NAMES:
        from obsmem.storage import postgres

        return getattr(postgres, name)
    raise AttributeError(f"module 'obsmem.storage' has no attribute {name!r}")


__all__ = [
    "EventSignal",
    "PostgresConnection",
    "PostgresProjectDatabase",
    "PostgresStore",
    "ProjectDatabase",
    "byte_order",
    "check_sqlite_capabilities",
    "index_statements",
    "lock_wait_bound",
    "migrate",
    "open_connection",
    "scratch_database",
    "sql_dialect",
    "storage_fault",
    "storage_faults",
    "WORD_JOIN_MAX_GAP",
]
