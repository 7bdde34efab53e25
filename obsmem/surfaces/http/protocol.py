"""Deadlines the ASGI app cannot see: a connection that sends nothing, or a request head that never ends.

uvicorn closes a kept-alive connection that stays idle after a response (``timeout_keep_alive``), but
waits without limit on a new connection that never sends a request and on a request whose line and
headers arrive byte by byte. The HTTP protocol class here adds both bounds:

- a new connection idle for ``server.keep_alive_seconds`` is closed, as a kept-alive one is;
- once a request has started, its line and headers must be complete within
  ``server.header_timeout_seconds``; otherwise the client gets ``408 request_timeout`` (JSON, with
  ``Connection: close``) and the connection is closed.

A request the HTTP parser refuses (a malformed request line or header, conflicting or non-numeric
``Content-Length``, bad chunk framing) gets ``400 invalid_http`` in the API's JSON error shape rather
than uvicorn's plain text, and its connection is closed.

The body has its own deadline, kept by the request guard (it reads every body before routing).
It builds on uvicorn's protocol classes (httptools when installed, as uvicorn's ``auto`` chooses, else
h11) and uses the state they share: ``cycle`` (the request being served, created once its head is
complete), ``transport`` and ``loop``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from obsmem.surfaces.http.responses import dumps

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - httptools is a dependency
    HttpToolsProtocol = None  # type: ignore[assignment,misc]


def closing_error_response(status: int, reason: str, error: dict[str, str]) -> bytes:
    """A whole response with ``{"error": error}``, the API's error shape, that ends its connection."""
    body = dumps({"error": error})
    head = b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n" % (status, reason.encode("ascii"))
    head += b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
    return head + body


def head_timeout_response(seconds: float) -> bytes:
    message = f"the request headers did not arrive within {seconds:g} s"
    return closing_error_response(408, "Request Timeout", {"code": "request_timeout", "message": message})


INVALID_HTTP_RESPONSE = closing_error_response(
    400,
    "Bad Request",
    {
        "code": "invalid_http",
        "message": "the request is not valid HTTP/1.1: its request line, headers or body framing "
        "(Content-Length, Transfer-Encoding) could not be parsed",
    },
)


class HeadDeadline:
    """Mixin over a uvicorn HTTP protocol class (see the module docstring)."""

    head_timeout_seconds: float = 10.0
    # Provided by the uvicorn protocol class this mixes into.
    cycle: Any
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    timeout_keep_alive: float
    timeout_keep_alive_task: asyncio.TimerHandle | None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)  # type: ignore[misc]
        self._head_timer: asyncio.TimerHandle | None = None
        # The idle bound before the first request: uvicorn arms it only after a response.
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive,
            self.timeout_keep_alive_handler,  # type: ignore[attr-defined]
        )

    def _awaiting_head(self) -> bool:
        return self.cycle is None or bool(self.cycle.response_complete)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # type: ignore[misc]
        if self.transport.is_closing() or not self._awaiting_head():
            self._cancel_head_timer()
        elif self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout_seconds, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)  # type: ignore[misc]

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def send_400_response(self, msg: str) -> None:
        """Answer a request the HTTP parser refused (uvicorn's own answer is plain text without a code)."""
        self._cancel_head_timer()
        if not self.transport.is_closing():
            self.transport.write(INVALID_HTTP_RESPONSE)
            self.transport.close()

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or not self._awaiting_head():
            return
        self.transport.write(head_timeout_response(self.head_timeout_seconds))
        self.transport.close()


def protocol_class(head_timeout_seconds: float, base: type[asyncio.Protocol] | None = None) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (``base``; default httptools, else h11) with the deadlines of this module."""
    if base is None:
        base = HttpToolsProtocol if HttpToolsProtocol is not None else H11Protocol
    return type(f"Deadline{base.__name__}", (HeadDeadline, base), {"head_timeout_seconds": head_timeout_seconds})
