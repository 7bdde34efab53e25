"""The ASGI layer in front of every route: host/origin checks, bearer keys and the body size limit.

It runs before routing, so no route (and no body parser) ever sees a request that is not allowed:

1. **No keys configured** (the server is bound to loopback): the ``Host`` header must name a loopback
   host (or one in ``server.allowed_hosts``) and an ``Origin`` header, when a browser sends one, must be
   a loopback origin. That stops a web page from reaching the unauthenticated API through DNS
   rebinding or a cross-site request.
2. **Keys configured**: every path except the public ones needs ``Authorization: Bearer <key>``;
   otherwise 401 ``unauthorized``. The matched key travels in the scope for the routes (which projects).
3. **Body limit**: a declared ``Content-Length`` above ``server.max_body_bytes`` is refused without
   reading the body into memory; a body without one (chunked) is counted as it streams and refused as soon
   as it passes the limit. The refused body's rest is read and thrown away (up to
   :data:`DISCARD_BODY_BYTES`, within the body deadline) before the ``413``: a client sends its whole body
   before it reads the answer, and a connection closed with unread bytes is reset, which loses the answer
   the client had not read yet (it saw a connection error, and retried). A declared body whose client waits
   for ``100 Continue`` is refused unread: it has not been sent. The body is read here, before
   routing, and replayed to the app. A JSON body must be UTF-8.
4. **Body deadline**: the whole body must arrive within ``server.body_timeout_seconds``; a client that
   stops sending gets ``408 request_timeout`` and the connection is closed.
5. **Failed authentication** is rate limited per client address (:mod:`~obsmem.surfaces.http.ratelimit`):
   an address out of allowance gets ``429 rate_limited`` with ``Retry-After``, its key unchecked.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from obsmem.surfaces.http.auth import OPEN_ACCESS, Access, KeyRing
from obsmem.surfaces.http.errors import send_error
from obsmem.surfaces.http.ratelimit import FailureLimiter

ACCESS_SCOPE_KEY = "obsmem.access"
PUBLIC_PATHS = frozenset({"/v1/health", "/openapi.json", "/docs", "/docs/oauth2-redirect"})
LOOPBACK_NAMES = frozenset({"localhost", "localhost."})
# The most bytes of a refused (too large) body read and thrown away so that its client hears the 413; a larger
# one's connection is closed unread, and its client may see a reset connection instead.
DISCARD_BODY_BYTES = 64 * 1024 * 1024
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="obsmem"'}

# What a refused request is told, with the two ways to be answered: name the host, or configure API keys.
FOREIGN_HOST = (
    "without API keys the server only answers loopback host names: add this host name to server.allowed_hosts, "
    "or configure API keys"
)
FOREIGN_ORIGIN = (
    "cross-origin requests are refused without API keys: add the origin's host name to server.allowed_hosts, "
    "or configure API keys"
)


def host_name(value: str) -> str:
    """``Host`` header value -> the bare, lowercased host name (port and IPv6 brackets removed)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    if value.count(":") == 1:
        return value.split(":", 1)[0]
    return value


def is_loopback(name: str) -> bool:
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def origin_host(origin: str) -> str | None:
    scheme, sep, rest = origin.partition("://")
    if not sep or scheme not in ("http", "https"):
        return None
    return host_name(rest.split("/", 1)[0])


class RequestGuard:
    def __init__(
        self,
        app: ASGIApp,
        *,
        keys: KeyRing,
        max_body_bytes: int,
        allowed_hosts: Iterable[str] = (),
        body_timeout_seconds: float = 30.0,
        auth_failures: FailureLimiter | None = None,
    ) -> None:
        self.app = app
        self.keys = keys
        self.max_body_bytes = max_body_bytes
        self.body_timeout_seconds = body_timeout_seconds
        self.auth_failures = auth_failures or FailureLimiter(30)
        self.allowed_hosts = frozenset(host_name(h) for h in allowed_hosts)
        self._hosts_seen: dict[str, bool] = {}

    def _host_allowed(self, name: str) -> bool:
        known = self._hosts_seen.get(name)
        if known is None:
            known = is_loopback(name) or name in self.allowed_hosts
            if len(self._hosts_seen) < 256:  # bounded: Host headers are client input
                self._hosts_seen[name] = known
        return known

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # no websocket routes: refuse before anything else
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = origin = authorization = content_length = content_type = expect = None
        for name, value in scope["headers"]:
            if name == b"host":
                host = value
            elif name == b"origin":
                origin = value
            elif name == b"authorization":
                authorization = value
            elif name == b"content-length":
                content_length = value
            elif name == b"expect":
                expect = value
            elif name == b"content-type":
                content_type = value

        access: Access = OPEN_ACCESS
        if not self.keys.enabled:
            if host is not None and not self._host_allowed(host_name(host.decode("latin-1"))):
                await send_error(send, 403, "forbidden", FOREIGN_HOST)
                return
            if origin is not None:
                seen = origin_host(origin.decode("latin-1"))
                if seen is None or not self._host_allowed(seen):
                    await send_error(send, 403, "forbidden", FOREIGN_ORIGIN)
                    return
        elif scope["path"] not in PUBLIC_PATHS:
            address = client_address(scope)
            wait = self.auth_failures.retry_after(address)
            if wait:
                message = "too many failed authentications from this address; retry after the time given"
                await send_error(send, 429, "rate_limited", message, headers={"Retry-After": str(wait)})
                return
            key = self.keys.match(authorization)
            if key is None:
                self.auth_failures.record_failure(address)
                message = "a valid API key is required: send 'Authorization: Bearer <key>'"
                await send_error(send, 401, "unauthorized", message, headers=_CHALLENGE)
                return
            access = Access(key)
        scope[ACCESS_SCOPE_KEY] = access

        if content_length is not None:
            try:
                declared = int(content_length)
            except ValueError:
                declared = -1
            if declared < 0:
                await send_error(send, 400, "invalid_request", "Content-Length is not a number", "Content-Length")
                return
            if declared > self.max_body_bytes:
                # A client that waits for "100 Continue" has sent none of it: reading it would ask for it all.
                if declared <= DISCARD_BODY_BYTES and (expect is None or expect.lower() != b"100-continue"):
                    with anyio.move_on_after(self.body_timeout_seconds):
                        await _discard_body(receive, 0)
                await self._too_large(send)
                return
        body: bytes | None = b""
        last: Message | None = None
        with anyio.move_on_after(self.body_timeout_seconds) as deadline:
            body, last = await self._read_body(receive)
            if body is None and last is not None and last.get("more_body", False):
                await _discard_body(receive, self.max_body_bytes)  # too large: so that the client hears why
        if body is None:  # a 413 even if the deadline came while the rest was thrown away
            await self._too_large(send)
            return
        if deadline.cancelled_caught:
            message = f"the request body did not arrive within {self.body_timeout_seconds:g} s"
            await send_error(send, 408, "request_timeout", message, "body", headers={"Connection": "close"})
            return
        if last is not None and last["type"] == "http.disconnect":
            return
        if body and content_type is not None and b"json" in content_type.lower():
            try:
                body.decode("utf-8")
            except UnicodeDecodeError:
                await send_error(send, 422, "invalid_request", "body is not valid UTF-8 text", "body")
                return
        await self.app(scope, _replay(body, receive), send)

    async def _read_body(self, receive: Receive) -> tuple[bytes | None, Message | None]:
        """The whole body and None, or (once it passes the limit) None and the message that passed it (the
        rest is left unread); or what was read and the message that ended it early (a disconnect)."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks), message
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > self.max_body_bytes:
                    return None, message
                chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks), None

    async def _too_large(self, send: Send) -> None:
        message = f"request body is larger than {self.max_body_bytes} bytes"
        # The limit is in the answer too, so a client cutting its events to fit can fit them to it at once.
        await send_error(
            send,
            413,
            "payload_too_large",
            message,
            "body",
            headers={"Connection": "close"},
            max_body_bytes=self.max_body_bytes,
        )


async def _discard_body(receive: Receive, seen: int) -> None:
    """Read the rest of a refused body and keep none of it, until it ends or passes :data:`DISCARD_BODY_BYTES`
    in all (``seen``: the bytes read before). The caller bounds the time."""
    while seen <= DISCARD_BODY_BYTES:
        message = await receive()
        if message["type"] != "http.request":
            return
        seen += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


def client_address(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the buffered body once, then the real channel (disconnects)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
