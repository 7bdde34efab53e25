"""The HNSW graph file: published atomically, verified before every load.

Publishing, while holding the directory's lock file:

1. commit ``dirty = 1`` in the state row;
2. write the graph to ``<name>.tmp``, fsync it, checksum it, rename it to ``<name>``, fsync the directory;
3. commit the new file name, size, checksum, version and count with ``dirty = 0``;
4. delete every other file in the directory.

A crash before step 3 leaves the state pointing at the old file (or none) with ``dirty = 1``; a crash
after it leaves only stray files. At load, stray files are deleted, and a dirty state discards the graph
file and rebuilds it from the stored embeddings. A file is loaded only if its size and BLAKE2b checksum
are the recorded ones: hnswlib trusts the sizes inside a file, so a truncated or crafted file could make
it read past its buffers; no such file ever reaches it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import hnswlib

from obsmem.errors import StorageError
from obsmem.faults import crash_point
from obsmem.indexer.state import IndexState, mark_dirty, update_state
from obsmem.storage import ProjectDatabase, storage_fault

LOCK_FILE = ".lock"
CHECKSUM = "blake2b"


def file_checksum(path: Path) -> str:
    digest = hashlib.blake2b()
    with path.open("rb") as handle:
        while block := handle.read(4 * 1024 * 1024):
            digest.update(block)
    return f"{CHECKSUM}:{digest.hexdigest()}"


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class IndexFiles:
    """The directory of one project's graph files."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        # (name, checksum, size, mtime, inode) of the last file whose checksum matched: status asks often,
        # and hashing a large graph file each time would cost a full read.
        self._verified_stamp: tuple[object, ...] | None = None

    def _not_a_directory(self) -> StorageError:
        return StorageError(
            "a path in the data directory is a file where obsmem keeps a directory (a project's semantic "
            "index directory); move it away"
        )

    def problem(self, state: IndexState) -> str | None:
        """What is wrong with the recorded graph file, for status: ``missing``, ``damaged`` or None.

        None also when no file is recorded. Loading never relies on this (see :meth:`verified_path`).
        """
        if not state.hnsw_file:
            return None
        path = self.directory / state.hnsw_file
        try:
            info = path.stat()
        except FileNotFoundError:
            return "missing"
        except NotADirectoryError:
            raise self._not_a_directory() from None
        if state.hnsw_bytes is None or not state.hnsw_checksum or info.st_size != state.hnsw_bytes:
            return "damaged"
        stamp = (state.hnsw_file, state.hnsw_checksum, info.st_size, info.st_mtime_ns, info.st_ino)
        if stamp != self._verified_stamp:
            if file_checksum(path) != state.hnsw_checksum:
                return "damaged"
            self._verified_stamp = stamp
        return None

    def ensure(self) -> None:
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            # Neither is a storage fault the surfaces know (a 500): the directory's place is taken by a file.
            raise self._not_a_directory() from None

    @contextlib.contextmanager
    def locked(self, name: str = LOCK_FILE, *, blocking: bool = True) -> Iterator[bool]:
        """An advisory lock (released by the OS if the process dies); yields False if busy and not blocking."""
        self.ensure()
        fd = os.open(self.directory / name, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def graph_files(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return [p for p in self.directory.iterdir() if p.is_file() and not p.name.startswith(".")]

    def remove_strays(self, keep: str | None) -> list[str]:
        removed = []
        for path in self.graph_files():
            if path.name != keep:
                path.unlink(missing_ok=True)
                removed.append(path.name)
        return removed

    def verified_path(self, state: IndexState) -> Path | None:
        """The recorded file if it exists with the recorded size and checksum, else None."""
        if not state.hnsw_file or state.hnsw_bytes is None or not state.hnsw_checksum:
            return None
        path = self.directory / state.hnsw_file
        try:
            if path.stat().st_size != state.hnsw_bytes:
                return None
        except OSError:
            return None
        if file_checksum(path) != state.hnsw_checksum:
            return None
        return path

    def load(self, state: IndexState, max_elements: int, ef: int) -> hnswlib.Index | None:
        path = self.verified_path(state)
        if path is None or state.dimensions is None:
            return None
        index = hnswlib.Index(space="ip", dim=state.dimensions)
        try:
            index.load_index(str(path), max_elements=max(max_elements, 1), allow_replace_deleted=True)
        except (RuntimeError, MemoryError, ValueError):
            return None
        if index.get_current_count() != state.hnsw_count:
            return None
        index.set_ef(ef)  # load_index resets ef to 10
        return index

    @staticmethod
    def _write(index: hnswlib.Index, temporary: Path) -> tuple[int, str]:
        """Write ``index`` to ``temporary``, fsynced; its size and checksum. hnswlib checks none of its writes:
        on a full disk it stops short and reports nothing, so the size is compared with the one it expects
        (a short file published would be recorded as whole and handed to hnswlib at every load)."""
        index.save_index(str(temporary))
        os.chmod(temporary, 0o600)  # derived data is as private as the memories it comes from
        with temporary.open("rb+") as handle:
            os.fsync(handle.fileno())
        crash_point("publish:written")
        size = temporary.stat().st_size
        if size != index.index_file_size():
            raise OSError(errno.ENOSPC, "the vector index graph file was written short")
        return size, file_checksum(temporary)

    def publish(self, db: ProjectDatabase, index: hnswlib.Index, *, version: int) -> str:
        """Write ``index`` (reflecting state ``version``) as the current graph file. Caller holds the lock."""
        self.ensure()
        with db.write() as conn:
            mark_dirty(conn)
        crash_point("publish:dirty")
        name = f"hnsw-{version}-{uuid.uuid4().hex[:8]}.bin"
        temporary = self.directory / f"{name}.tmp"
        final = self.directory / name
        try:
            size, checksum = self._write(index, temporary)
            os.replace(temporary, final)
            _fsync_directory(self.directory)
        except OSError as exc:
            # The state stays dirty: the next maintenance rebuilds and publishes again; the graph in memory
            # still serves searches meanwhile.
            temporary.unlink(missing_ok=True)
            raise storage_fault(exc) or exc from None
        crash_point("publish:renamed")
        with db.write() as conn:
            update_state(
                conn,
                hnsw_file=name,
                hnsw_bytes=size,
                hnsw_checksum=checksum,
                hnsw_version=version,
                hnsw_count=index.get_current_count(),
                dirty=0,
            )
            # Removal entries up to this version are in the file; later loaders need only newer ones.
            conn.execute("DELETE FROM semantic_removed WHERE version <= ?", (version,))
            update_state(conn, removed_floor=version)
        crash_point("publish:committed")
        self.remove_strays(keep=name)
        crash_point("publish:cleaned")
        return name
