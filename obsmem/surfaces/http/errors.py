"""Every error the HTTP API returns has one shape: ``{"error": {"code", "message", "field"?}}``.

Errors are mapped here once: :class:`ObsmemError` by its ``status`` and ``code``; FastAPI's own request
validation to 422 with the code of the field (``invalid_query`` for ``query``, ``invalid_date`` for
``after``/``before``, ...) or ``invalid_request``; unknown paths to 404 ``not_found``; a wrong method to
405 ``method_not_allowed``. Messages name the field and what is allowed, never the value sent. Anything
unexpected is a 500 ``internal_error`` with no detail (and a log line with the traceback). Storage faults
(:mod:`obsmem.storage.faults`) are 503 with their own codes and ``Retry-After`` where waiting helps.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import apsw
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Send

from obsmem.dates import parse_window
from obsmem.errors import ObsmemError
from obsmem.ids import parse_id_prefix
from obsmem.storage import storage_fault
from obsmem.surfaces.http.access_log import configured_keys, loggable_target
from obsmem.surfaces.http.responses import JSONBody, dumps
from obsmem.validation import field_path, project_name, session_id

logger = logging.getLogger("obsmem.http")

# A request field whose problems have a code of their own, whichever layer finds them.
FIELD_CODES = {
    "query": "invalid_query",
    "after": "invalid_date",
    "before": "invalid_date",
    "project": "invalid_project",
    "session_id": "invalid_session",
    "id": "invalid_id",
    "scope": "invalid_scope",
}
MAX_MESSAGE_CHARS = 300
# The core validator of a field FastAPI checks by pattern: its message says what is allowed in words, where
# the pattern mismatch would only show the regular expression. Core messages never quote the value.
CORE_VALIDATORS: dict[str, Callable[[Any], object]] = {
    "after": lambda value: parse_window(after=value),
    "before": lambda value: parse_window(before=value),
    "project": project_name,
    "session_id": session_id,
    "id": parse_id_prefix,
}


def error_content(code: str, message: str, field: str | None = None, **details: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        body["field"] = field
    body.update(details)
    return {"error": body}


def error_response(
    status: int, code: str, message: str, field: str | None = None, headers: dict[str, str] | None = None
) -> Response:
    return JSONBody(error_content(code, message, field), status_code=status, headers=headers)


def obsmem_error_response(exc: ObsmemError) -> Response:
    headers: dict[str, str] = {}
    if exc.status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="obsmem"'
    if exc.retry_after is not None:
        headers["Retry-After"] = str(exc.retry_after)
    return JSONBody({"error": exc.to_dict()}, status_code=exc.status, headers=headers or None)


async def send_error(
    send: Send,
    status: int,
    code: str,
    message: str,
    field: str | None = None,
    headers: dict[str, str] | None = None,
    **details: Any,
) -> None:
    """Answer from ASGI middleware (before any route runs); ``details`` are further keys of the error object."""
    body = dumps(error_content(code, message, field, **details))
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw_headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body})


def _core_message(field: str, value: Any) -> str | None:
    """The core validator's message for a value FastAPI's pattern refused (None if the core accepts it)."""
    validator = CORE_VALIDATORS.get(field)
    if validator is None:
        return None
    try:
        validator(value)
    except ObsmemError as exc:
        return exc.message
    return None


def _clean_message(err: dict[str, Any]) -> str:
    message = str(err.get("msg", "is not valid")).removeprefix("Value error, ")
    value = err.get("input")
    # Pydantic messages do not quote the input, but make sure: a value is never sent back.
    if isinstance(value, str) and len(value) >= 3 and value in message:
        message = message.replace(value, "<value>")
    return message[:MAX_MESSAGE_CHARS]


def validation_problem(exc: RequestValidationError) -> tuple[str, str, str]:
    """``(code, field, message)`` for the first problem FastAPI found."""
    errors = exc.errors()
    err: dict[str, Any] = dict(errors[0]) if errors else {"loc": ("body",), "msg": "is not valid"}
    loc = list(err.get("loc", ()))
    source = loc.pop(0) if loc and loc[0] in ("body", "path", "query", "header", "cookie") else "body"
    if err.get("type") == "json_invalid":
        reason = str((err.get("ctx") or {}).get("error", "JSON decode error"))[:100]
        return "invalid_request", "body", f"body is not valid JSON ({reason})"
    field = field_path(loc) or source
    if field == "body" and err.get("type") in ("model_attributes_type", "dict_type", "missing"):
        message = "body must be a JSON object sent with Content-Type: application/json"
        return "invalid_request", field, message
    code = FIELD_CODES.get(field, "invalid_request")
    if err.get("type") == "string_unicode":
        return code, field, f"{field}: text is not valid Unicode (it holds a lone surrogate)"
    if err.get("type") == "string_pattern_mismatch" and (core := _core_message(field, err.get("input"))):
        return code, field, core[:MAX_MESSAGE_CHARS]
    return code, field, f"{field}: {_clean_message(err)}"


def allowed_methods(request: Request) -> list[str]:
    """Every method the published API serves on this path.

    Starlette's 405 names only the methods of the first route whose path matched, but one path may be
    served by several routes (recall is GET, forget is DELETE on the same path). The OpenAPI document
    is the public list of what is served, so the path is matched against its templates.
    """
    app = request.app
    table: list[tuple[re.Pattern[str], list[str]]] | None = getattr(app.state, "method_table", None)
    if table is None:
        table = []
        for template, operations in app.openapi().get("paths", {}).items():
            pattern = re.escape(template)
            pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", pattern)
            table.append((re.compile(pattern), sorted(method.upper() for method in operations)))
        app.state.method_table = table
    return sorted({method for pattern, methods in table if pattern.fullmatch(request.url.path) for method in methods})


def install_error_handlers(app: FastAPI) -> None:
    async def on_obsmem_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ObsmemError)
        return obsmem_error_response(exc)

    async def on_validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        code, field, message = validation_problem(exc)
        return error_response(422, code, message, field)

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            return error_response(404, "not_found", "no such route; see /docs for the API")
        if exc.status_code == 405:
            allowed = allowed_methods(request)
            headers = {"Allow": ", ".join(allowed)} if allowed else None
            return error_response(405, "method_not_allowed", "method not allowed on this route", headers=headers)
        if exc.status_code == 400:
            # FastAPI raises this when a body cannot be parsed at all (e.g. JSON nested too deeply).
            return error_response(422, "invalid_request", "body could not be read as JSON", "body")
        if exc.status_code == 413:
            return error_response(413, "payload_too_large", "request body is too large")
        code = "unauthorized" if exc.status_code == 401 else "http_error"
        return error_response(exc.status_code, code, "request refused")

    async def on_storage_fault(request: Request, exc: Exception) -> Response:
        # A full disk, a read-only mount, an I/O error, a lock timeout or a damaged file reached a route
        # without passing through the database wrapper (opening a file, making a directory): still a 503.
        fault = storage_fault(exc)
        if fault is None:
            return await on_unexpected(request, exc)
        path = loggable_target(request.url.path, configured_keys(request.app))
        logger.warning("storage fault on %s %s: %s", request.method, path, fault.code)
        return obsmem_error_response(fault)

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        path = loggable_target(request.url.path, configured_keys(request.app))
        logger.exception("unhandled error on %s %s", request.method, path)
        return error_response(500, "internal_error", "internal error; the server log has the details")

    app.add_exception_handler(ObsmemError, on_obsmem_error)
    app.add_exception_handler(apsw.Error, on_storage_fault)
    app.add_exception_handler(OSError, on_storage_fault)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(HTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unexpected)
