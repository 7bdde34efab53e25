"""Event streams (the pipeline's SSE stream, the MCP endpoint's GET stream) are bounded.

- At most ``server.max_stream_followers`` streams are open at once; one more is answered
  ``503 too_many_streams`` with ``Retry-After`` before it starts.
- A stream that has sent nothing but keep-alive pings for ``server.stream_idle_seconds`` ends: the
  response is finished properly (the last chunk is sent), so the client sees a stream that ended, not a
  broken connection, and reconnects when it wants more (the SSE stream resumes with ``Last-Event-ID``).
  An MCP GET stream in stateless mode never carries a message, so it ends after that bound too.
"""

from __future__ import annotations

import time

import anyio
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from obsmem.surfaces.http.errors import error_response, send_error

RETRY_AFTER_SECONDS = 5
# An SSE line that carries a message; keep-alive pings are comment lines (": ping").
MESSAGE_FIELDS = (b"data:", b"event:", b"id:")


class StreamSlot:
    """One open stream's place; released once, however the stream ends."""

    def __init__(self, followers: StreamFollowers) -> None:
        self._followers: StreamFollowers | None = followers

    def release(self) -> None:
        if self._followers is not None:
            self._followers.open -= 1
            self._followers = None


class StreamFollowers:
    """The open streams of one app, and their bounds."""

    def __init__(self, limit: int, idle_seconds: float) -> None:
        self.limit = limit
        self.idle_seconds = idle_seconds
        self.open = 0

    def claim(self) -> StreamSlot | None:
        if self.open >= self.limit:
            return None
        self.open += 1
        return StreamSlot(self)

    def _refusal_message(self) -> str:
        return f"{self.limit} event streams are open, the most this server follows at once; retry later"

    def refusal(self) -> Response:
        headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}
        return error_response(503, "too_many_streams", self._refusal_message(), headers=headers)

    async def send_refusal(self, send: Send) -> None:
        headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}
        await send_error(send, 503, "too_many_streams", self._refusal_message(), headers=headers)


def carries_message(body: bytes) -> bool:
    return any(line.startswith(MESSAGE_FIELDS) for line in body.splitlines())


async def serve_bounded_stream(app: ASGIApp, scope: Scope, receive: Receive, send: Send, idle_seconds: float) -> None:
    """Run ``app`` (which answers with an event stream) and end its stream once it is idle too long.

    The idle clock starts with the response: until then the app is still working on the request (and a
    request cancelled before its response started would get no answer at all).
    """
    started = complete = False
    responding = anyio.Event()
    last_message = time.monotonic()

    async def watched_send(message: Message) -> None:
        nonlocal started, complete, last_message
        if message["type"] == "http.response.start":
            started = True
            last_message = time.monotonic()
            responding.set()
        elif message["type"] == "http.response.body":
            if carries_message(message.get("body", b"")):
                last_message = time.monotonic()
            complete = not message.get("more_body", False)
        await send(message)

    async with anyio.create_task_group() as group:

        async def end_when_idle() -> None:
            await responding.wait()
            while (remaining := last_message + idle_seconds - time.monotonic()) > 0:
                await anyio.sleep(remaining)
            group.cancel_scope.cancel()

        group.start_soon(end_when_idle)
        await app(scope, receive, watched_send)
        group.cancel_scope.cancel()
    if started and not complete:
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class FollowedStream(Response):
    """A route's streaming response, holding its follower slot and ending when idle (see module doc)."""

    def __init__(self, stream: Response, slot: StreamSlot, idle_seconds: float) -> None:
        self.stream = stream
        self.slot = slot
        self.idle_seconds = idle_seconds
        self.status_code = stream.status_code
        self.background = None
        self.raw_headers = stream.raw_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await serve_bounded_stream(self.stream, scope, receive, send, self.idle_seconds)
        finally:
            self.slot.release()
