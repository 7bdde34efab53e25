"""Reading a transcript file from a byte offset, complete lines only, plain or compressed.

Offsets count bytes of the (decompressed) text. A last line without its newline is still being written
by the agent: it is left for the next import. Compressed rollouts (``.gz``, ``.zst``) cannot seek, so
they are decompressed from the start and the consumed prefix is skipped.
"""

from __future__ import annotations

import errno
import fcntl
import gzip
import io
import os
import stat as stat_module
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

WINDOW = 64 * 1024
_READ = 1 << 20


def _compression_errors() -> tuple[type[Exception], ...]:
    errors: list[type[Exception]] = [zlib.error, EOFError]  # gzip: a damaged stream, a cut-off file
    try:
        import zstandard

        errors.append(zstandard.ZstdError)
    except ImportError:
        pass
    return tuple(errors)


DAMAGED_COMPRESSION = _compression_errors()
"""What reading a damaged compressed file raises besides OSError (gzip's bad header is an OSError)."""


@dataclass(frozen=True)
class FileStamp:
    size: int
    mtime_ns: int


class NotARegularFile(OSError):
    """A transcript path naming a FIFO, a device or a socket: reading one waits for a writer that may never
    come (an import hung on it), and it has no size to resume by."""


def _regular(info: os.stat_result, path: Path) -> os.stat_result:
    if not stat_module.S_ISREG(info.st_mode):
        raise NotARegularFile(errno.EINVAL, "not a regular file", str(path))
    return info


def stamp(path: Path) -> FileStamp:
    """Size and modification time; for a SQLite database its write-ahead log counts too. A path that is
    not a regular file is :class:`NotARegularFile`, before anything opens it."""
    info = _regular(path.stat(), path)
    size, mtime = info.st_size, info.st_mtime_ns
    wal = path.with_name(path.name + "-wal")
    if path.suffix == ".db" and wal.exists():
        wal_info = wal.stat()
        size, mtime = size + wal_info.st_size, max(mtime, wal_info.st_mtime_ns)
    return FileStamp(size, mtime)


_NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL})
# How long an import waits for the file's lock (another import storing it, or another program's flock),
# as long as a write waits for the database; then the file is reported busy and the run goes on.
IMPORT_LOCK_WAIT_SECONDS = 30.0
_LOCK_POLL_SECONDS = 0.05


class FileBusy(OSError):
    """The file's import lock stayed held past :data:`IMPORT_LOCK_WAIT_SECONDS`."""


def _take_lock(descriptor: int, path: Path) -> None:
    deadline = time.monotonic() + IMPORT_LOCK_WAIT_SECONDS
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise FileBusy(
                    errno.EWOULDBLOCK, "another import (or program) held the file's lock", str(path)
                ) from None
            time.sleep(_LOCK_POLL_SECONDS)
        except OSError as exc:
            # A file system without locks (some network mounts) imports as before, unlocked, rather than never.
            if exc.errno not in _NO_LOCKS:
                raise
            return


@contextmanager
def import_lock(path: Path) -> Iterator[None]:
    """Hold the file's import lock for the block: imports of one file take turns, each starting from the
    watermark the one before it left. Two imports side by side (a hook firing while ``--follow`` stores the
    session, two hooks at once) merged against events the other stored after they looked, and stored
    those again. An advisory ``flock`` on the file itself: the agent writing it takes none, every path to
    it (a link, a symlink) names the same lock, and the system releases it when a killed import dies.
    Waited for at most :data:`IMPORT_LOCK_WAIT_SECONDS`, then :class:`FileBusy`: a lock some other program
    keeps must not hang every hook and ``--follow`` round."""
    # O_NONBLOCK: opening a FIFO named as a transcript must not wait for a writer.
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        _regular(os.fstat(descriptor), path)
        _take_lock(descriptor, path)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def expand_home(path: Path | str) -> Path:
    """``path`` with ``~`` or ``~user`` expanded, or as written when that user has no home directory (as a
    shell leaves it) or cannot be looked up (a NUL byte in the name, from a hook payload's JSON): a
    transcript path is then simply not found, where ``Path.expanduser`` raised."""
    try:
        return Path(path).expanduser()
    except (RuntimeError, ValueError):
        return Path(path)


def is_compressed(path: Path) -> bool:
    return path.suffix in (".gz", ".zst")


@contextmanager
def open_text_bytes(path: Path) -> Iterator[IO[bytes]]:
    """The file's decompressed bytes as a binary stream."""
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as handle:
            yield handle
    elif path.suffix == ".zst":
        import zstandard

        with open(path, "rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as reader:
            yield io.BufferedReader(reader, _READ)  # type: ignore[arg-type]
    else:
        with open(path, "rb", buffering=_READ) as handle:
            yield handle


def _skip(handle: IO[bytes], offset: int, path: Path) -> None:
    if not is_compressed(path):
        handle.seek(offset)
        return
    left = offset
    while left > 0:
        chunk = handle.read(min(left, _READ))
        if not chunk:
            break
        left -= len(chunk)


def complete_lines(path: Path, offset: int, *, take_last: bool = False) -> Iterator[tuple[bytes, int]]:
    """``(line, end offset)`` for each complete line after ``offset``; ``take_last`` also yields a final line
    without its newline (formats whose records are not one per line decide for themselves)."""
    with open_text_bytes(path) as handle:
        _skip(handle, offset, path)
        position = offset
        for raw in handle:
            if not raw.endswith(b"\n") and not take_last:
                return
            position += len(raw)
            yield raw, position
