"""The MCP endpoint of the HTTP server: streamable HTTP at ``/mcp/{project}``.

An MCP client names the project in the URL it is configured with (``http://host:port/mcp/my-app``)
and, optionally, its current session (``?session_id=s1``, recall's default scope). The request guard
has already checked the API key; here the key must also allow the project (otherwise
``project_not_found``, exactly as for a missing project). The SDK's session manager then serves the
request in stateless mode with JSON responses: every POST is answered on its own, so nothing is kept
per client and any worker can answer any request. A GET opens the SDK's stream for server-initiated
messages; stateless, it never carries one, so it counts as a stream follower and ends after
``server.stream_idle_seconds`` like any idle stream (:mod:`~obsmem.surfaces.http.streams`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import Receive, Scope, Send

from obsmem.app import Obsmem
from obsmem.errors import ObsmemError
from obsmem.surfaces.http.auth import OPEN_ACCESS, Access
from obsmem.surfaces.http.errors import send_error
from obsmem.surfaces.http.guard import ACCESS_SCOPE_KEY
from obsmem.surfaces.http.streams import StreamFollowers, serve_bounded_stream
from obsmem.surfaces.mcp_server import MCP_SCOPE_KEY, build_server
from obsmem.validation import project_name
from obsmem.validation import session_id as check_session_id

MCP_PATH = "/mcp/{project}"


class McpEndpoint:
    """ASGI app behind the ``/mcp/{project}`` route; the session manager lives for the app's lifespan."""

    def __init__(self, service: Obsmem, followers: StreamFollowers) -> None:
        self.server = build_server(service)
        self.followers = followers
        self.manager: StreamableHTTPSessionManager | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        # A session manager runs once; a fresh one per lifespan lets the app start again (tests do).
        manager = StreamableHTTPSessionManager(app=self.server, json_response=True, stateless=True)
        async with manager.run():
            self.manager = manager
            try:
                yield
            finally:
                self.manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        access: Access = scope.get(ACCESS_SCOPE_KEY, OPEN_ACCESS)
        try:
            project = access.require(project_name(scope["path_params"]["project"]))
            session = _session_from_query(scope.get("query_string", b""))
        except ObsmemError as exc:
            await send_error(send, exc.status, exc.code, exc.message, exc.field)
            return
        if self.manager is None:
            await send_error(send, 503, "service_unavailable", "the MCP endpoint is not running")
            return
        scope[MCP_SCOPE_KEY] = {"project": project, "session_id": session, "user": access.user}
        if scope["method"] != "GET":
            await self.manager.handle_request(scope, receive, send)
            return
        slot = self.followers.claim()
        if slot is None:
            await self.followers.send_refusal(send)
            return
        # Stateless, the stream keeps no event store and never carries a message, so there is nothing to
        # resume: without the header the SDK opens a fresh stream (with it, it answered nothing at all).
        scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k != b"last-event-id"]}
        try:
            await serve_bounded_stream(self.manager.handle_request, scope, receive, send, self.followers.idle_seconds)
        finally:
            slot.release()


def _session_from_query(query_string: bytes) -> str | None:
    values: dict[str, list[str]] = parse_qs(query_string.decode("latin-1"))
    found: Any = values.get("session_id")
    if not found:
        return None
    return check_session_id(found[-1])
