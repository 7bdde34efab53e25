"""Bearer API keys and what each one may see.

Keys come from the settings (``api_keys``: a key and the project slugs it may use, or ``*``). A
presented token is hashed and compared with every configured key's hash using a constant-time
comparison, without stopping at the first match, so the time taken says nothing about which key (or
how much of one) matched. Keys are never logged; a key is named in logs by its ``name`` only.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass

from obsmem.app import LOCAL_USER
from obsmem.errors import ProjectNotFound
from obsmem.settings import ApiKey


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


class KeyRing:
    """The configured keys, held as SHA-256 digests."""

    def __init__(self, keys: Iterable[ApiKey]) -> None:
        self._entries = [(_digest(key.key.get_secret_value().encode("utf-8")), key) for key in keys]

    @property
    def enabled(self) -> bool:
        return bool(self._entries)

    def match(self, authorization: bytes | None) -> ApiKey | None:
        """The key an ``Authorization: Bearer <token>`` header value names, or None."""
        token = bearer_token(authorization)
        if token is None:
            return None
        presented = _digest(token)
        found: ApiKey | None = None
        for stored, key in self._entries:
            if hmac.compare_digest(stored, presented) and found is None:
                found = key
        return found


def bearer_token(authorization: bytes | None) -> bytes | None:
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return None
    token = token.strip()
    return token or None


@dataclass(frozen=True)
class Access:
    """What one request may reach: every project (no keys configured, or a ``*`` key) or a list."""

    key: ApiKey | None = None

    @property
    def everything(self) -> bool:
        return self.key is None or self.key.allows("*")

    def allows(self, project: str) -> bool:
        return self.key is None or self.key.allows(project)

    def require(self, project: str) -> str:
        """Raise ``project_not_found`` for a project this key may not use, exactly as for a missing one."""
        if not self.allows(project):
            raise ProjectNotFound(f"project '{project}' does not exist", field="project")
        return project

    def visible(self, names: Iterable[str]) -> list[str]:
        return [name for name in names if self.allows(name)]

    @property
    def user(self) -> str | None:
        """Whose user tier of notes this caller reaches: the key's owner (None if it has none), or the local
        account when no keys are configured."""
        return LOCAL_USER if self.key is None else self.key.user


OPEN_ACCESS = Access(None)
