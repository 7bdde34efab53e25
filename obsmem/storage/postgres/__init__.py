"""The PostgreSQL backend of the storage contract (installed with the ``postgres`` extra: psycopg 3).

- :mod:`~obsmem.storage.postgres.store`: :class:`PostgresStore`, the pool and the project list;
- :mod:`~obsmem.storage.postgres.connection`: :class:`PostgresProjectDatabase`, a project's ``write()`` and
  ``read()`` transactions, and the connection the owning modules' SQL runs on;
- :mod:`~obsmem.storage.postgres.migrations` and ``schema/``: checksummed migrations of a project's schema;
- :mod:`~obsmem.storage.postgres.users`: :class:`PostgresUserTiers`, each owner's user tier of notes in a
  schema of its own;
- :mod:`~obsmem.storage.postgres.notify`: :class:`EventSignal`, LISTEN/NOTIFY push for event followers;
- :mod:`~obsmem.storage.postgres.scratch`: a throwaway database beside the configured one (evaluation);
- :mod:`~obsmem.storage.postgres.sql`: the placeholder translation, the one dialect hook shared SQL needs;
- :mod:`~obsmem.storage.postgres.indexes`: a table's indexes as statements to drop and make them (bulk loads);
- :mod:`~obsmem.storage.postgres.faults`: psycopg failures as ``storage_*`` errors.

Other modules import these names from :mod:`obsmem.storage`, which loads this package only when asked.
"""

from obsmem.storage.postgres.connection import PostgresConnection, PostgresProjectDatabase, project_schema
from obsmem.storage.postgres.indexes import index_statements
from obsmem.storage.postgres.migrations import POSTGRES_MIGRATIONS
from obsmem.storage.postgres.notify import EventSignal
from obsmem.storage.postgres.scratch import scratch_database
from obsmem.storage.postgres.store import PostgresStore

__all__ = [
    "EventSignal",
    "POSTGRES_MIGRATIONS",
    "PostgresConnection",
    "PostgresProjectDatabase",
    "PostgresStore",
    "index_statements",
    "project_schema",
    "scratch_database",
]
