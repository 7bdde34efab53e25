"""Projects: one SQLite database per project under the data directory.

A project name is a validated slug and the only thing that chooses a path, so no request can name a
file. Reading an unknown project is ``project_not_found``; only writes create one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import threading
from pathlib import Path

import apsw

from obsmem.errors import InvalidProject, ProjectNotFound, StorageBusy, StorageError
from obsmem.settings import home_expanded
from obsmem.storage import (
    ProjectDatabase,
    check_sqlite_capabilities,
    migrate,
    open_connection,
    storage_fault,
    storage_faults,
)
from obsmem.validation import project_name

DATABASE_FILE = "obsmem.db"
BUILDING_PREFIX = ".building-"  # a database being created: never listed, removed if creation fails


def create_database(path: Path) -> None:
    """Create a project's database atomically: it appears migrated and complete, or not at all.

    The file is built under a temporary name in the same directory, synced and then linked into place, so
    a full disk or a crash half-way never leaves an empty file that would list the project and then fail
    every read. Linking (not renaming) keeps a database another process created meanwhile.
    """
    directory = path.parent
    made_directory = not directory.exists()
    if directory.exists() and not directory.is_dir():
        # Neither EEXIST nor ENOTDIR is a storage fault the surfaces know (a 500, the path in the error); an
        # ancestor of the data directory that is a file stays the CLI's io_error naming it.
        raise StorageError(
            "a path in the data directory is a file where obsmem keeps a directory (a project's or a user "
            "tier's); move it away"
        )
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        _remove_abandoned_builds(directory)
        scratch = directory / f"{BUILDING_PREFIX}{os.getpid()}-{secrets.token_hex(4)}.db"
        try:
            conn = open_connection(scratch, create=True)
            try:
                with storage_faults():
                    migrate(conn)
                    # Fold the WAL into the file: the rename must carry every page, not leave them behind.
                    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            finally:
                conn.close()
            os.chmod(scratch, 0o600)
            with open(scratch, "rb") as handle:
                os.fsync(handle.fileno())
            _publish(scratch, path)
            _fsync_directory(directory)
        finally:
            for leftover in (scratch, *(Path(f"{scratch}{suffix}") for suffix in ("-wal", "-shm", "-journal"))):
                with contextlib.suppress(FileNotFoundError):
                    leftover.unlink()
    except (OSError, apsw.Error) as exc:
        if made_directory:
            with contextlib.suppress(OSError):
                directory.rmdir()  # only if empty: never removes anything but what this call made
        fault = storage_fault(exc)
        if fault is None:
            raise
        raise fault from exc
    except BaseException:
        if made_directory:
            with contextlib.suppress(OSError):
                directory.rmdir()
        raise


def _remove_abandoned_builds(directory: Path) -> None:
    """Delete what a creation killed half-way left (its process is gone); a live one's files are kept."""
    for leftover in directory.glob(f"{BUILDING_PREFIX}*"):
        pid_text = leftover.name.removeprefix(BUILDING_PREFIX).split("-", 1)[0]
        if not pid_text.isdigit() or _process_alive(int(pid_text)):
            continue
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def _publish(scratch: Path, path: Path) -> None:
    """Give the finished database its name, unless another process created one first (theirs is kept)."""
    try:
        os.link(scratch, path)
    except FileExistsError:
        pass
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP) or path.exists():
            raise
        os.rename(scratch, path)  # a file system without hard links: the rename is still atomic


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class ProjectRegistry:
    """Opens (and on first write creates) project databases; one :class:`ProjectDatabase` per project."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = home_expanded(data_dir, "data directory").resolve()
        self.projects_dir = self.data_dir / "projects"
        self._open: dict[str, ProjectDatabase] = {}
        self._lock = threading.Lock()

    def directory(self, project: str) -> Path:
        return self.projects_dir / project_name(project)

    def database_path(self, project: str) -> Path:
        return self.directory(project) / DATABASE_FILE

    def exists(self, project: str) -> bool:
        return self.database_path(project).is_file()

    def names(self) -> list[str]:
        """Projects on disk that a request could name. A directory whose name is not a valid project name
        (made by hand, or named like a secret before such names were refused) is not listed, so it is
        never polled, indexed or written to a log."""
        if not self.projects_dir.is_dir():
            return []
        return sorted(
            entry.name
            for entry in self.projects_dir.iterdir()
            if (entry / DATABASE_FILE).is_file() and _is_valid_name(entry.name)
        )

    def get(self, project: str, *, create: bool = False) -> ProjectDatabase:
        """The project's database; ``create=True`` makes it on first use (writes only)."""
        name = project_name(project)
        with self._lock:
            db = self._open.get(name)
            if db is not None:
                return db
            path = self.database_path(name)
            if not path.is_file():
                if not create:
                    raise ProjectNotFound(f"project '{name}' does not exist", field="project")
                check_sqlite_capabilities()
                create_database(path)
            else:
                conn = open_connection(path, create=False)
                try:
                    with storage_faults():
                        migrate(conn)
                finally:
                    conn.close()
            db = ProjectDatabase(path)
            self._open[name] = db
            return db

    def drop(self, project: str) -> bool:
        """Delete a project's directory (its database and index files); False when it did not exist. The
        directory is first renamed aside, so the project disappears at once, whole.

        A server that has the project open keeps writing to the deleted files: stop every server and worker
        of the data directory first. A writer caught in the act is refused (``storage_busy``); an idle one
        cannot be seen from here."""
        name = project_name(project)
        self.release(name)
        directory = self.directory(name)
        if not directory.is_dir():
            return False
        _refuse_while_written(directory / DATABASE_FILE, name)
        aside = directory.with_name(f".{name}.dropped-{os.getpid()}-{secrets.token_hex(4)}")
        directory.rename(aside)
        shutil.rmtree(aside)
        return True

    def staging_area(self, project: str) -> Path:
        """A new, unlisted data directory beside the projects (a name no project can have), where a
        replacement for ``project`` is built before :meth:`replace_with` swaps it in."""
        name = project_name(project)
        staging = self.projects_dir / f".{name}.replacing-{os.getpid()}-{secrets.token_hex(4)}"
        staging.mkdir(parents=True)
        return staging

    def replace_with(self, project: str, built: Path) -> None:
        """Put the project directory ``built`` (inside a :meth:`staging_area`) in the place of ``project``'s,
        by rename: the old directory is moved aside, the new one moved in, then the old one deleted. A
        failure between the two renames moves the old one back. The same warning as :meth:`drop` holds:
        stop the servers of the data directory first."""
        name = project_name(project)
        self.release(name)
        directory = self.directory(name)
        aside: Path | None = None
        if directory.is_dir():
            _refuse_while_written(directory / DATABASE_FILE, name)
            aside = directory.with_name(f".{name}.replaced-{os.getpid()}-{secrets.token_hex(4)}")
            directory.rename(aside)
        try:
            built.rename(directory)
        except BaseException:
            if aside is not None:
                aside.rename(directory)
            raise
        _fsync_directory(self.projects_dir)
        if aside is not None:
            shutil.rmtree(aside)

    def release(self, project: str) -> None:
        """Close one open project's connections; it opens again on its next use (long batch jobs over many
        projects, such as the eval, stay within the file descriptor limit)."""
        with self._lock:
            db = self._open.pop(project, None)
        if db is not None:
            db.close()

    def close(self) -> None:
        with self._lock:
            for db in self._open.values():
                db.close()
            self._open.clear()


def _refuse_while_written(path: Path, project: str) -> None:
    """Raise ``storage_busy`` when another connection holds the database's write lock at this moment (a
    write transaction in progress); the check takes the lock for an instant and gives it back."""
    if not path.is_file():
        return
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READWRITE)
    try:
        conn.set_busy_timeout(0)
        try:
            conn.execute("BEGIN IMMEDIATE")
        except apsw.BusyError:
            raise StorageBusy(
                f"project '{project}' is being written by another process; stop its servers and workers first"
            ) from None
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def _is_valid_name(name: str) -> bool:
    try:
        project_name(name)
    except InvalidProject:
        return False
    return True
