"""Storage faults: what the disk or SQLite refused, turned into obsmem's error model.

A full disk, a read-only mount, an I/O error, a lock held beyond the busy timeout and a damaged file are
conditions of the machine, not bugs: each becomes a :class:`~obsmem.errors.StorageError` subclass with a
stable code (503 over HTTP, with ``Retry-After`` where waiting helps; exit status 74 from the CLI; a
``<code>: <message>`` tool text). The mapping lives here once; :class:`~obsmem.storage.connection.
ProjectDatabase` applies it to every read and write, and the surfaces apply it again to anything that
escaped (opening files, creating directories), so no storage fault is ever a 500 or a traceback.

Messages say what happened and what to do; they never carry memory text or SQL.
"""

from __future__ import annotations

import errno

import apsw

from obsmem.errors import (
    StorageBusy,
    StorageCorrupt,
    StorageError,
    StorageFull,
    StorageIOError,
    StorageReadOnly,
)

FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
READ_ONLY_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM}


def full() -> StorageFull:
    return StorageFull("the disk holding the data directory is full; free space and retry (nothing was stored)")


def read_only() -> StorageReadOnly:
    return StorageReadOnly(
        "the data directory cannot be written (read-only file system or permissions); nothing was stored"
    )


def io_error() -> StorageIOError:
    return StorageIOError("the operating system reported an I/O error on the database; retry, then check the disk")


def busy(*, bounded: bool = False) -> StorageBusy:
    """``bounded``: a shorter bound than the busy timeout (``lock_wait_bound``) ended the wait."""
    if bounded:
        return StorageBusy("the database stayed locked by another writer beyond the time this write could wait; retry")
    return StorageBusy("the database stayed locked by another writer beyond the busy timeout; retry")


def corrupt() -> StorageCorrupt:
    return StorageCorrupt("the database file is damaged or is not a SQLite database; restore it from a backup")


def storage_fault(exc: BaseException) -> StorageError | None:
    """The storage error ``exc`` stands for, or None when it is not a storage fault (a bug, a constraint)."""
    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, apsw.FullError):
        return full()
    if isinstance(exc, apsw.ReadOnlyError):
        return read_only()
    if isinstance(exc, (apsw.BusyError, apsw.LockedError)):
        return busy()
    if isinstance(exc, (apsw.CorruptError, apsw.NotADBError)):
        return corrupt()
    if isinstance(exc, apsw.IOError):
        return io_error()
    if isinstance(exc, apsw.CantOpenError):
        return StorageError("the database file could not be opened (missing, or its directory is not accessible)")
    if isinstance(exc, OSError) and not isinstance(exc, apsw.Error):
        if exc.errno in FULL_ERRNOS:
            return full()
        if exc.errno in READ_ONLY_ERRNOS:
            return read_only()
        if exc.errno == errno.EIO:
            return io_error()
    return None
