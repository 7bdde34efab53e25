"""A cap on open connections and on requests in flight, answered with ``503 over_capacity`` beyond it.

The count of open connections belongs to the HTTP server, which tells :class:`ConnectionGauge` how to read
it once it exists (``serve()`` does; an app served in process has no connection count and only the
in-flight cap applies). A request that arrives while either count is over its cap is answered at once,
with ``Retry-After`` and ``Connection: close``: the connection it came on is one of those over the cap.
Streams (SSE, MCP) are requests in flight for as long as they are open.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from obsmem.surfaces.http.errors import send_error

RETRY_AFTER_SECONDS = 1


class ConnectionGauge:
    """How many connections the server has open (0 until a server binds it)."""

    def __init__(self) -> None:
        self._count: Callable[[], int] = lambda: 0

    def bind(self, count: Callable[[], int]) -> None:
        self._count = count

    def open_connections(self) -> int:
        return self._count()


class CapacityGuard:
    def __init__(self, app: ASGIApp, *, max_connections: int, max_in_flight: int, gauge: ConnectionGauge) -> None:
        self.app = app
        self.max_connections = max_connections
        self.max_in_flight = max_in_flight
        self.gauge = gauge
        self.in_flight = 0

    def _refusal(self) -> str | None:
        if self.gauge.open_connections() > self.max_connections:
            return f"more than {self.max_connections} connections are open; retry shortly"
        if self.in_flight >= self.max_in_flight:
            return f"{self.max_in_flight} requests are being served; retry shortly"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal()
        if refusal is not None:
            headers = {"Retry-After": str(RETRY_AFTER_SECONDS), "Connection": "close"}
            await send_error(send, 503, "over_capacity", refusal, headers=headers)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
