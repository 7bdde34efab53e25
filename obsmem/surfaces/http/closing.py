"""No 5xx drops a keep-alive connection silently.

A response with a 5xx status says the server is in trouble: it carries ``Connection: close`` and the
connection is closed once the response is complete, so the client opens a fresh one for its next request
instead of finding its kept-alive connection reset. Starlette re-raises an unexpected exception after its
error handler has answered; the ASGI server would then log the traceback a second time and close the
transport without that header. This layer wraps everything else (Starlette's error middleware included),
adds the header, and ends the exception there once the answer is complete (the handler has logged it).
An exception in the middle of a streamed response is passed on: aborting the connection is then the only
honest way to tell the client that the stream is broken.
"""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from obsmem.surfaces.http.access_log import configured_keys, loggable_target
from obsmem.surfaces.http.errors import send_error

logger = logging.getLogger("obsmem.http")

CLOSE = (b"connection", b"close")


def with_connection_close(message: Message) -> Message:
    """A ``http.response.start`` message that also says ``Connection: close`` (once)."""
    headers = [(name, value) for name, value in message.get("headers", []) if name.lower() != b"connection"]
    return {**message, "headers": [*headers, CLOSE]}


class CloseOnServerError:
    """ASGI wrapper: every 5xx closes its connection properly; an unexpected exception becomes a JSON 500."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = complete = gone = False

        async def watched_receive() -> Message:
            nonlocal gone
            message = await receive()
            gone = gone or message["type"] == "http.disconnect"
            return message

        async def send_closing_on_5xx(message: Message) -> None:
            nonlocal started, complete
            if message["type"] == "http.response.start":
                started = True
                if message["status"] >= 500:
                    message = with_connection_close(message)
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                complete = True
            await send(message)

        try:
            await self.app(scope, watched_receive, send_closing_on_5xx)
        except Exception:
            if complete:
                return  # answered (a 500 with Connection: close) and logged by the error handler
            if started:
                raise
            logger.exception("unhandled error on %s %s", scope.get("method"), _shown_path(scope))
            await _internal_error(send)
            return
        if not started and not gone:
            # An app that returns without answering (a library's code path with no response) would leave
            # the server to improvise a plain-text 500; answer in the API's shape instead.
            logger.error("no response was sent for %s %s", scope.get("method"), _shown_path(scope))
            await _internal_error(send)


def _shown_path(scope: Scope) -> str:
    """The request path as these log lines may show it: a session id or project name is client text and
    may hold a secret (the request that carried it is often the one that failed)."""
    return loggable_target(str(scope.get("path", "")), configured_keys(scope.get("app")))


async def _internal_error(send: Send) -> None:
    message = "internal error; the server log has the details"
    await send_error(send, 500, "internal_error", message, headers={"Connection": "close"})
