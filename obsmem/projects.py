"""Projects: one SQLite database per project under the data directory.

A project name is a validated slug and the only thing that chooses a path, so no request can name a
file. Reading an unknown project is ``project_not_found``; only writes create one.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from obsmem.errors import InvalidProject, ProjectNotFound
from obsmem.storage.connection import ProjectDatabase, check_sqlite_capabilities, open_connection
from obsmem.storage.migrations import migrate
from obsmem.validation import project_name

DATABASE_FILE = "obsmem.db"


class ProjectRegistry:
    """Opens (and on first write creates) project databases; one :class:`ProjectDatabase` per project."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
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
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            conn = open_connection(path, create=create)
            try:
                migrate(conn)
            finally:
                conn.close()
            if create:
                os.chmod(path, 0o600)
            db = ProjectDatabase(path)
            self._open[name] = db
            return db

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


def _is_valid_name(name: str) -> bool:
    try:
        project_name(name)
    except InvalidProject:
        return False
    return True
