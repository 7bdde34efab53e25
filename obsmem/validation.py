"""Small validators shared by every way in (HTTP, CLI, tools, Python)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from obsmem.errors import InvalidProject, InvalidSession, ValidationFailed
from obsmem.redaction import secret_kind

PROJECT_SLUG = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
# Parts of a field path that are safe to show; anything else came from the client and is not echoed.
_FIELD_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
SESSION_ID_RULE = "1-128 characters of letters, digits, '.', '_', ':', '@' or '-', starting with a letter or digit"
# C0 controls other than tab, and DEL: never part of memory text or queries (the trigram index uses
# U+0001 as a sentinel).
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# Every character str.splitlines() breaks a line at (U+2028 and U+0085 among them): what "one line" excludes.
LINE_BREAKS = re.compile(r"[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")


def replace_lone_surrogates(text: str) -> str:
    """``text`` with every lone surrogate (half of a UTF-16 pair, which UTF-8 cannot encode) replaced by
    U+FFFD; the same object when it holds none (ASCII text, the common case, is not even scanned).

    Node.js writes them when it cuts a string inside an emoji (JSON ``"\\ud83d"`` without its pair), and
    Python reads them from a file decoded with ``surrogateescape``: the rest of the text is still worth
    keeping, so it is repaired rather than refused."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def without_lone_surrogates(value: Any) -> Any:
    """``value`` (text, or JSON of lists and objects: an event's fields) with :func:`replace_lone_surrogates`
    applied to every string in it, object keys included; the same object when nothing needed replacing.

    A value of the object (an event's tool arguments) holding an object whose keys would become the same
    once replaced (``"k\\ud800"`` and ``"k\\udc00"`` are both ``"k\\ufffd"``) is kept as its JSON text,
    repaired, as arguments obsmem would refuse as JSON are stored: merging the keys would lose a value."""
    if not isinstance(value, dict):
        try:
            return _without_lone_surrogates(value)
        except _KeysMerge:
            return _as_repaired_text(value)
    items: list[tuple[Any, Any]] = []
    for key, item in value.items():
        try:
            repaired = _without_lone_surrogates(item)
        except _KeysMerge:
            repaired = _as_repaired_text(item)
        items.append((_without_lone_surrogates(key) if isinstance(key, str) else key, repaired))
    if all(new[0] is old[0] and new[1] is old[1] for new, old in zip(items, value.items(), strict=True)):
        return value
    return dict(items)


class _KeysMerge(Exception):
    """Two keys of an object become the same once their lone surrogates are replaced."""


def _without_lone_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return replace_lone_surrogates(value)
    if isinstance(value, dict):
        items = [(_without_lone_surrogates(key), _without_lone_surrogates(item)) for key, item in value.items()]
        if all(new[0] is old[0] and new[1] is old[1] for new, old in zip(items, value.items(), strict=True)):
            return value
        repaired = dict(items)
        if len(repaired) < len(items):
            raise _KeysMerge
        return repaired
    if isinstance(value, list):
        items = [_without_lone_surrogates(item) for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return items
    return value


def _as_repaired_text(value: Any) -> str:
    """``value`` as JSON text, lone surrogates replaced (its keys stay apart: they are text now)."""
    return replace_lone_surrogates(json.dumps(value, ensure_ascii=False))


def project_name(value: object) -> str:
    """A project slug: ``[a-z0-9][a-z0-9._-]{0,63}`` that does not look like a secret. Never a path."""
    if not isinstance(value, str) or not PROJECT_SLUG.fullmatch(value):
        raise InvalidProject(
            "project must be a slug: 1-64 characters of a-z, 0-9, '.', '_' or '-', starting with a letter or digit",
            field="project",
        )
    kind = secret_kind(value)
    if kind is not None:
        raise InvalidProject(_looks_secret("project", kind), field="project")
    return value


def session_id(value: object, field: str = "session_id") -> str:
    """A session id: ``[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}`` that does not look like a secret."""
    if not isinstance(value, str) or not SESSION_ID.fullmatch(value):
        raise InvalidSession(
            f"{field} must be {SESSION_ID_RULE}",
            field=field,
        )
    kind = secret_kind(value)
    if kind is not None:
        raise InvalidSession(_looks_secret(field, kind), field=field)
    return value


def _looks_secret(field: str, kind: str) -> str:
    # Identifiers are shown in URLs, access logs, event streams and memory blocks, and are the keys rows
    # are found by: redacting one would merge sessions, so one that looks like a credential is refused.
    return (
        f"{field} looks like a secret ({kind}) and is refused: identifiers appear in URLs, logs and memory "
        "blocks; use a name that is not a credential"
    )


def session_id_text(value: str | None) -> str | None:
    """A pydantic validator for a session id field: the rule in words, never the value (a pattern's
    message would show the regular expression instead)."""
    if value is not None and not SESSION_ID.fullmatch(value):
        raise ValueError(f"must be {SESSION_ID_RULE}")
    return value


def secret_free_identifier(value: str | None) -> str | None:
    """A pydantic validator for identifier fields checked by pattern only: refuse one that looks like a
    secret (the message names the kind, never the value)."""
    kind = None if value is None else secret_kind(value)
    if kind is not None:
        raise ValueError(f"looks like a secret ({kind}); use an identifier that is not a credential")
    return value


def field_path(parts: Iterable[object]) -> str:
    """A dotted field path for error messages. Client-chosen keys (an unexpected property name) may hold
    anything, lone surrogates and credentials included, so a part that is not a plain identifier or index,
    or that looks like a secret (``ghp_...`` is a plain identifier too), is shown as ``<key>`` rather than
    echoed."""
    return ".".join(_shown_part(part) for part in parts)


def _shown_part(part: object) -> str:
    if isinstance(part, int):
        return str(part)
    if isinstance(part, str) and _FIELD_PART.fullmatch(part) and secret_kind(part) is None:
        return part
    return "<key>"


def first_problem(exc: ValidationError, prefix: str = "") -> ValidationFailed:
    """Turn a pydantic error into one ValidationFailed naming the first bad field (never its value)."""
    err: dict[str, Any] = dict(exc.errors()[0])
    location = ".".join(part for part in (prefix, field_path(err["loc"])) if part) or "body"
    message = str(err["msg"]).removeprefix("Value error, ")
    return ValidationFailed(f"{location}: {message}", field=location)
