"""Where each tier's notes live: the project tier in the project's database, the user tier in a database
of its own under ``<data_dir>/users/<owner>/obsmem.db`` (the same schema), which every project that owner
reaches can read. On PostgreSQL the user tier is a schema of its own in the projects' database.

The owner is the API key's owner (``api_keys[].owner``, else its ``name``) or, without keys, the local
account. A caller with no owner (a key with neither) has no user tier: its searches read the project alone
and a user-tier write is refused with ``user_tier_unavailable``.
"""

from __future__ import annotations

import functools
import getpass
import re
from pathlib import Path
from typing import Protocol

from obsmem.errors import ValidationFailed
from obsmem.projects import ProjectRegistry
from obsmem.storage import ProjectDatabase

# The user of a process without API keys: the local account (resolved when used).
LOCAL_USER = "@local"
_NOT_SLUG = re.compile(r"[^a-z0-9._-]+")


@functools.cache
def local_account() -> str:
    """The local account's name as a slug (``local`` when it has none usable); read once per process."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = ""
    slug = _NOT_SLUG.sub("-", name.lower()).strip("-._")[:64]
    return slug or "local"


class UserRegistry(ProjectRegistry):
    """User-tier databases: a registry like the projects', rooted at ``<data_dir>/users``."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.projects_dir = self.data_dir / "users"


class Registry(Protocol):
    """What the tiers need of a registry of databases: SQLite's ``ProjectRegistry`` and ``UserRegistry``, or
    on PostgreSQL the store (projects) and its user tiers (``PostgresStore.user_tiers()``)."""

    def get(self, name: str, *, create: bool = False) -> ProjectDatabase: ...

    def exists(self, name: str) -> bool: ...

    def names(self) -> list[str]: ...

    def release(self, name: str) -> None: ...

    def close(self) -> None: ...


class TierStores:
    """The databases a caller's notes live in: its project's and, with an owner, its user tier's.

    On SQLite the user tiers are files under ``<data_dir>/users``; on PostgreSQL the service passes the
    store's user tiers (a schema each, see ``obsmem/storage/postgres/users.py``)."""

    def __init__(self, projects: ProjectRegistry | Registry, users: Registry | None = None) -> None:
        self.projects = projects
        self.users: Registry = users if users is not None else UserRegistry(projects.data_dir)  # type: ignore[union-attr]

    @staticmethod
    def owner(user: str | None) -> str | None:
        return local_account() if user == LOCAL_USER else user

    def project(self, project: str, *, create: bool = False) -> ProjectDatabase:
        return self.projects.get(project, create=create)

    def user(self, user: str | None, *, create: bool = False) -> ProjectDatabase | None:
        """The user tier's database; None when the caller has none or (reading) it was never written."""
        owner = self.owner(user)
        if owner is None:
            if create:
                raise ValidationFailed(
                    "this API key has no owner, so it has no user tier: set api_keys[].owner",
                    code="user_tier_unavailable",
                    field="tier",
                )
            return None
        if not create and not self.users.exists(owner):
            return None
        return self.users.get(owner, create=create)

    def tier(self, project: str, tier: str, user: str | None, *, create: bool = False) -> ProjectDatabase | None:
        if tier == "user":
            return self.user(user, create=create)
        return self.project(project, create=create)

    def readable(self, project: str, user: str | None) -> list[tuple[str, ProjectDatabase]]:
        """``(tier, database)`` of every tier a search of ``project`` by this caller reads, project first."""
        found = [("project", self.project(project))]
        user_db = self.user(user)
        if user_db is not None:
            found.append(("user", user_db))
        return found

    def user_names(self) -> list[str]:
        return self.users.names()

    def upgrade_user(self, owner: str) -> None:
        """Open an owner's user tier, which applies the migrations it lacks as opening a project does, and
        close it again (a pass over every tier holds one open at a time)."""
        self.users.get(owner)
        self.users.release(owner)

    def close(self) -> None:
        self.users.close()
