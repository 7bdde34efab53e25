"""Which project a transcript goes to: from the working directory it records.

1. ``--project`` given: that project, for every file.
2. The working directory is, or lies under, a path of ``project_map`` (the longest such path wins).
3. Otherwise a slug made from the directory's last component: lower case, runs of other characters than
   ``a-z 0-9 . _ -`` turned into ``-``, at most 64 characters, starting with a letter or digit
   (``/home/ann/My App`` -> ``my-app``). A name that cannot be made valid falls back to ``imported``.

Gemini CLI records only the SHA-256 of the project root: it is matched against the SHA-256 of each
``project_map`` path, else the project is ``gemini-<first 12 hex digits of the hash>``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import PurePosixPath

from obsmem.errors import ValidationFailed
from obsmem.validation import project_name

FALLBACK_PROJECT = "imported"
_INVALID = re.compile(r"[^a-z0-9._-]+")


def slug_for_directory(directory: str) -> str:
    """A valid project slug from a directory's last component (see the module docstring)."""
    name = PurePosixPath(directory.rstrip("/\\").replace("\\", "/")).name
    slug = _INVALID.sub("-", name.lower()).lstrip("._-")[:64].rstrip("-")
    try:
        return project_name(slug)
    except ValidationFailed:
        return FALLBACK_PROJECT


def _normal(path: str) -> str:
    return path.rstrip("/") or "/"


def project_for_cwd(cwd: str | None, project_map: Mapping[str, str]) -> str | None:
    """The project of a working directory, or None when there is none to go by."""
    if not cwd:
        return None
    cwd = _normal(cwd)
    best: tuple[int, str] | None = None
    for root, slug in project_map.items():
        root = _normal(root)
        inside = cwd == root or cwd.startswith(root.rstrip("/") + "/")
        if inside and (best is None or len(root) > best[0]):
            best = (len(root), slug)
    return best[1] if best is not None else slug_for_directory(cwd)


def project_for_hash(project_hash: str, project_map: Mapping[str, str]) -> str:
    """Gemini CLI's project hash: a ``project_map`` path with that SHA-256, else ``gemini-<hash>``."""
    for root, slug in project_map.items():
        for candidate in {root, _normal(root)}:
            if hashlib.sha256(candidate.encode("utf-8")).hexdigest() == project_hash:
                return slug
    digest = re.sub(r"[^a-f0-9]", "", project_hash.lower())[:12]
    return f"gemini-{digest}" if digest else FALLBACK_PROJECT
