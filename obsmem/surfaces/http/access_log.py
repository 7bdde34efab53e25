"""The access log without secrets: every path segment and query value is checked before it is logged.

uvicorn logs one line per request with the request target as sent (``GET /v1/projects/p/sessions/<id>/
memory?session_id=...``). Session ids and project names that look like secrets are refused with a 422,
but the refused request is still logged, so the target itself is redacted: a segment or query value
that holds a secret (after percent-decoding, with invisible characters ignored as everywhere in
:mod:`obsmem.redaction`) is replaced whole by its marker, and so is a query value whose name names a secret
(``?api_key=abcdef123456``: neither half looks like a credential alone). The rest of the line (client, method, status)
is kept, so operators still see which project a request went to.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote, quote_plus, unquote, unquote_plus

from uvicorn.config import LOGGING_CONFIG

from obsmem.redaction import MARK, is_secret_key_name, secret_kind

ACCESS_LOGGER = "uvicorn.access"


def _shown(piece: str, *, query: bool, known: Sequence[str] = ()) -> str:
    if not piece:
        return piece
    decoded = unquote_plus(piece) if query else unquote(piece)
    if any(secret in decoded for secret in known):
        return MARK.format(kind="api_key")
    kind = secret_kind(decoded)
    return piece if kind is None else MARK.format(kind=kind)


def _shown_value(name: str, value: str, known: Sequence[str]) -> str:
    """A query value, replaced whole when its name says it is a secret (``api_key=abcdef123456``) or when
    name and value together read as one (``token=...``): neither half alone need look like a credential."""
    if not value:
        return value
    decoded_name, decoded_value = unquote_plus(name), unquote_plus(value)
    if is_secret_key_name(decoded_name):
        return MARK.format(kind="secret")
    kind = secret_kind(f"{decoded_name}={decoded_value}")
    return _shown(value, query=True, known=known) if kind is None else MARK.format(kind=kind)


def _without_known(target: str, known: Sequence[str]) -> str:
    """``target`` with each known secret cut out whole, as sent or percent-encoded, before the target is
    split: a key may hold '/' (which would split it into segments) or '+' (which decoding reads as a space),
    so matching it piece by piece would miss it."""
    for secret in known:
        for written in {secret, quote(secret, safe=""), quote(secret), quote_plus(secret)}:
            target = target.replace(written, MARK.format(kind="api_key"))
    return target


def configured_keys(app: Any) -> tuple[str, ...]:
    """The API keys of the service an app serves (none when it has no service yet): what every log line of
    a request target cuts, the error log's as well as the access log's."""
    settings = getattr(getattr(getattr(app, "state", None), "service", None), "settings", None)
    return tuple(api_key.key.get_secret_value() for api_key in getattr(settings, "api_keys", ()))


def loggable_target(target: str, known: Sequence[str] = ()) -> str:
    """A request target (path and query) with every segment or value that holds a secret replaced: one
    that looks like a credential, or that holds one of ``known`` (the server's own API keys, which need
    not look like anything: a client that sends its key in the wrong place must not have it logged)."""
    target = _without_known(target, known)
    path, has_query, query = target.partition("?")
    shown = "/".join(_shown(segment, query=False, known=known) for segment in path.split("/"))
    if not has_query:
        return shown
    pairs = []
    for pair in query.split("&"):
        name, equals, value = pair.partition("=")
        pairs.append(_shown(name, query=True, known=known) + equals + _shown_value(name, value, known))
    return f"{shown}?{'&'.join(pairs)}"


class RedactedTargets(logging.Filter):
    """Rewrites the request target of uvicorn's access records (``client, method, target, version,
    status``) before any handler formats them."""

    def __init__(self, known: Sequence[str] = ()) -> None:
        super().__init__()
        self.known = tuple(known)

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], loggable_target(args[2], self.known), *args[3:])
        return True


def logging_config(known: Sequence[str] = ()) -> dict[str, Any]:
    """uvicorn's own logging configuration with :class:`RedactedTargets` on the access logger; ``known``:
    the secrets to cut wherever they appear (the configured API keys)."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["redacted_targets"] = {"()": f"{__name__}.RedactedTargets", "known": list(known)}
    config["loggers"][ACCESS_LOGGER]["filters"] = ["redacted_targets"]
    return config
