"""``create_app(service)``: the FastAPI application.

Layers, outermost first: :class:`~obsmem.surfaces.http.closing.CloseOnServerError` (every 5xx closes
its connection properly), :class:`~obsmem.surfaces.http.capacity.CapacityGuard` (connections and
requests in flight), Starlette's error middleware (a last-resort JSON 500), the
:class:`~obsmem.surfaces.http.guard.RequestGuard` (host/origin, API keys and their failure rate, body
limit and deadline), FastAPI's routing with the error handlers of :mod:`~obsmem.surfaces.http.errors`. Routes live in
``routes/<area>.py``; another area joins with one line in :data:`ROUTERS`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.concurrency import run_in_threadpool
from starlette.routing import Route
from starlette.types import ASGIApp

from obsmem.app import Obsmem
from obsmem.surfaces.http.auth import KeyRing
from obsmem.surfaces.http.capacity import CapacityGuard, ConnectionGauge
from obsmem.surfaces.http.closing import CloseOnServerError
from obsmem.surfaces.http.errors import install_error_handlers
from obsmem.surfaces.http.guard import PUBLIC_PATHS, RequestGuard
from obsmem.surfaces.http.mcp import MCP_PATH, McpEndpoint
from obsmem.surfaces.http.ratelimit import FailureLimiter
from obsmem.surfaces.http.responses import JSONBody
from obsmem.surfaces.http.routes import health, ingest, memory, notes, pipeline, projects
from obsmem.surfaces.http.streams import StreamFollowers
from obsmem.version import __version__

API_PREFIX = "/v1"
# Routes are matched in this order: the hot read path (search, recall) first.
ROUTERS: list[APIRouter] = [
    memory.router,
    notes.router,
    ingest.router,
    pipeline.router,
    projects.router,
    health.router,
]
BEARER_SCHEME = "bearerAuth"

DESCRIPTION = """\
Observational memory for AI agents: append conversation events, write observations, search memories
(`memory_search`) and recover their provenance (`recall`). With a model configured, an Observer turns
events into observations in the background; a session's memory renders instantly for compaction
(`.../sessions/{session_id}/memory`), its progress is at `.../status`, and the pipeline's events are a
list or a server-sent-events stream (`/v1/projects/{project}/events`).

Errors are `{"error": {"code", "message", "field"?}}` with stable codes. When the server has API keys,
every route except `/v1/health` needs `Authorization: Bearer <key>`, and a key only reaches its
projects. The MCP endpoint (streamable HTTP) is at `/mcp/{project}`.
"""


class ObsmemAPI(FastAPI):
    """FastAPI with the connection layers outside Starlette's error middleware (which answers a 500 with
    a ``send`` of its own, so only a layer outside it can mark that answer ``Connection: close``)."""

    def __init__(self, *, capacity: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._capacity = capacity

    def build_middleware_stack(self) -> ASGIApp:
        return CloseOnServerError(CapacityGuard(super().build_middleware_stack(), **self._capacity))


def create_app(service: Obsmem) -> FastAPI:
    """The app; ``app.state.connections`` is the gauge a server binds to its count of open connections."""
    settings = service.settings
    server = settings.server
    followers = StreamFollowers(server.max_stream_followers, server.stream_idle_seconds)
    gauge = ConnectionGauge()
    mcp_endpoint = McpEndpoint(service, followers) if server.mcp else None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Background jobs (observation) run in the server process unless jobs.in_server is false.
        if settings.jobs.in_server:
            service.start_workers()
        try:
            if mcp_endpoint is None:
                yield
            else:
                async with mcp_endpoint.running():
                    yield
        finally:
            await run_in_threadpool(service.stop_workers)

    app = ObsmemAPI(
        capacity={"max_connections": server.max_connections, "max_in_flight": server.max_in_flight, "gauge": gauge},
        title="obsmem",
        version=__version__,
        description=DESCRIPTION,
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
        default_response_class=JSONBody,
        lifespan=lifespan,
    )
    app.state.service = service
    app.state.stream_followers = followers
    app.state.connections = gauge
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router, prefix=API_PREFIX)
    if mcp_endpoint is not None:
        app.router.routes.append(Route(MCP_PATH, endpoint=mcp_endpoint, methods=["GET", "POST", "DELETE"]))
    keys = KeyRing(settings.api_keys)
    app.add_middleware(
        RequestGuard,
        keys=keys,
        max_body_bytes=server.max_body_bytes,
        allowed_hosts=server.allowed_hosts,
        body_timeout_seconds=server.body_timeout_seconds,
        auth_failures=FailureLimiter(server.auth_failures_per_minute),
    )
    app.openapi = lambda: _openapi(app, secured=keys.enabled)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI, *, secured: bool) -> dict[str, Any]:
    """The published schema; with keys configured it declares bearer auth on every non-public route."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    if secured:
        schema.setdefault("components", {})["securitySchemes"] = {
            BEARER_SCHEME: {"type": "http", "scheme": "bearer", "description": "An API key from the settings."}
        }
        for path, operations in schema.get("paths", {}).items():
            for operation in operations.values():
                operation["security"] = [] if path in PUBLIC_PATHS else [{BEARER_SCHEME: []}]
    app.openapi_schema = schema
    return schema
