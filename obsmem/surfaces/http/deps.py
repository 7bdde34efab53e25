"""What routes share: the service, the caller's access, path parameters and documented error statuses.

A route module (``routes/<area>.py``) defines an ``APIRouter`` and uses these; :func:`create_app`
includes it under ``/v1``. Routes that only read may be ``async def`` and call the service directly
(an exact search takes about a millisecond; the threadpool hop costs more than that); anything that can
wait on the write lock is a plain ``def`` so FastAPI runs it in the threadpool.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Request

from obsmem.app import Obsmem
from obsmem.surfaces.http.auth import OPEN_ACCESS, Access
from obsmem.surfaces.http.guard import ACCESS_SCOPE_KEY
from obsmem.surfaces.http.models import ID_PATTERN, PROJECT_PATTERN, SESSION_PATTERN, ErrorResponse

ProjectName = Annotated[
    str,
    Path(pattern=PROJECT_PATTERN, max_length=64, description="Project slug: `[a-z0-9][a-z0-9._-]{0,63}`."),
]
SessionPath = Annotated[
    str, Path(pattern=SESSION_PATTERN, max_length=128, description="Session id (letters, digits, `._:@-`).")
]
MemoryIdPath = Annotated[
    str, Path(pattern=ID_PATTERN, description="A memory id or a unique lowercase hex prefix of 12-64 characters.")
]


def service_of(request: Request) -> Obsmem:
    service: Obsmem = request.app.state.service
    return service


def access_of(request: Request) -> Access:
    access: Access = request.scope.get(ACCESS_SCOPE_KEY, OPEN_ACCESS)
    return access


def allowed_project(request: Request, project: str) -> str:
    """The project, if this caller may use it; otherwise ``project_not_found`` (as if it did not exist)."""
    return access_of(request).require(project)


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorResponse, "description": description}


# Statuses every authenticated route can answer with; a route adds its own (409, 503) to these.
COMMON_ERRORS: dict[int | str, dict[str, Any]] = {
    401: _error("No API key, or an unknown one (`unauthorized`)."),
    403: _error("Without API keys: a non-loopback Host or a cross-origin request (`forbidden`)."),
    404: _error("Unknown project, or one this key may not use (`project_not_found`); unknown memory (`not_found`)."),
    413: _error("Request body larger than `server.max_body_bytes` (`payload_too_large`)."),
    422: _error("A field is not valid; `field` names it (`invalid_request`, `invalid_query`, `invalid_date`, ...)."),
    408: _error("The request body did not arrive within `server.body_timeout_seconds` (`request_timeout`)."),
    429: _error("Too many failed authentications from this address (`rate_limited`; see `Retry-After`)."),
    503: _error(
        "More connections or requests than the server's caps (`over_capacity`), or the storage failed: "
        "`storage_full`, `storage_read_only`, `storage_io_error`, `storage_busy` or `storage_corrupt` "
        "(with `Retry-After` where waiting helps)."
    ),
}


def errors(*extra: tuple[int, str]) -> dict[int | str, dict[str, Any]]:
    responses = dict(COMMON_ERRORS)
    for status, description in extra:
        if status in responses:  # a route's own reasons come first; the common ones still apply
            description = f"{description} {responses[status]['description']}"
        responses[status] = _error(description)
    return responses
