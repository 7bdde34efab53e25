"""Storage: connections, migrations and the schema of a project database.

The names below are what the rest of the code may import: :class:`ProjectDatabase` (one writer and one
reader per thread over a project's SQLite file), the start-up capability check, the migration runner, and
the mapping of SQLite and OS faults to the ``storage_*`` errors of :mod:`obsmem.errors`. The modules
inside are internal and may move.
"""

from obsmem.storage.connection import ProjectDatabase, check_sqlite_capabilities, open_connection, storage_faults
from obsmem.storage.faults import storage_fault
from obsmem.storage.migrations import migrate

__all__ = [
    "ProjectDatabase",
    "check_sqlite_capabilities",
    "migrate",
    "open_connection",
    "storage_fault",
    "storage_faults",
]
