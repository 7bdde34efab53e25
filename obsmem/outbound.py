"""Outbound HTTP: the one policy for every call obsmem makes to a model, embedding or rerank endpoint.

The policy, enforced here so that no client can forget part of it:

- **One overall deadline per request**, covering connect, send, wait and the whole response body. httpx's
  timeouts bound each network operation, not a whole request: a server that drips one byte per second
  never trips a read timeout. So requests run as coroutines on one private event-loop thread, inside
  ``asyncio.timeout(deadline)``, which cancels the request (and closes its connection) when the deadline
  passes, whatever the server is doing. Callers stay synchronous and may be on any thread.
- **No redirects**: a 3xx is an answer like any other status, so a key never follows a redirect to
  another host.
- **A cap on the response size**: a body larger than the cap is refused as it streams in, never buffered.
- **The key only in the ``Authorization`` header**, never in the URL or the body; proxies and ``.netrc``
  from the environment are ignored (``trust_env=False``), so nothing adds credentials or reroutes calls.
- **Nothing of the exchange in logs or errors**: :class:`OutboundError` carries only the failure stage, a
  short message, the transport error's class name and a correlation id, never the payload, the response
  body or the key, and is raised without a chained cause; log lines carry the same safe fields.

:class:`Endpoint` sends bytes and returns the status, headers and (for a 200 answer) the body; the chat
client builds its retries on it. :class:`JsonEndpoint` adds what the embedding and rerank clients share:
any status but 200 is an error and the reply must be JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from obsmem.version import __version__

log = logging.getLogger("obsmem.outbound")

MAX_RESPONSE_BYTES = 64 * 1024 * 1024
# Beyond its own deadline, a request's future is abandoned this much later: a guard against a wedged loop.
_LOOP_GRACE_SECONDS = 5.0

KeySource = Callable[[], str | None]
_T = TypeVar("_T")


class OutboundError(Exception):
    """A request failed. ``stage``: connect, timeout, status, too_large or malformed.

    ``cause`` is the class name of the transport error behind a ``connect`` failure (``ConnectError``,
    ``ConnectTimeout``...), for messages that say what went wrong without quoting anything.
    """

    def __init__(self, stage: str, message: str, correlation_id: str, *, cause: str | None = None) -> None:
        super().__init__(message)
        self.stage = stage
        self.message = message
        self.correlation_id = correlation_id
        self.cause = cause


@dataclass(frozen=True)
class Reply:
    """One answer. The body is read only for HTTP 200; other answers are judged by status and headers."""

    status: int
    headers: httpx.Headers
    body: bytes


def key_from_environment(variable: str | None) -> KeySource:
    """The key in ``variable``, read at each request (unset or empty: no key is sent)."""
    return lambda: (os.environ.get(variable) or None) if variable else None


def new_correlation_id() -> str:
    return uuid.uuid4().hex[:12]


class _LoopThread:
    """One daemon thread running an event loop for all outbound requests of the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="obsmem-outbound", daemon=True)
                thread.start()
                self._loop = loop
            return self._loop


_LOOP = _LoopThread()


def run_on_loop(work: Coroutine[Any, Any, _T], seconds: float) -> _T:
    """Run ``work`` on the one outbound loop thread and wait for its answer, from any thread. ``work`` bounds
    itself (``asyncio.timeout``); ``seconds`` plus a grace only guards against a wedged loop: past it the
    work is cancelled and ``TimeoutError`` raised."""
    future = asyncio.run_coroutine_threadsafe(work, _LOOP.loop())
    try:
        return future.result(timeout=seconds + _LOOP_GRACE_SECONDS)
    except FutureTimeout:
        future.cancel()
        raise TimeoutError from None


class Endpoint:
    """``POST`` to one URL under the policy. Thread-safe; reuse it across calls."""

    def __init__(
        self,
        url: str,
        *,
        timeout_seconds: float,
        api_key: KeySource | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        connect_timeout_seconds: float | None = None,
        label: str = "endpoint",
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or parts.username or parts.password:
            # The settings refuse such URLs; this guards callers that build an Endpoint themselves.
            raise ValueError(f"{label}: the URL must be http(s) without credentials")
        self.url = url
        self.timeout_seconds = timeout_seconds
        self.max_response_bytes = max_response_bytes
        self.connect_timeout_seconds = connect_timeout_seconds
        self.label = label
        self._api_key = api_key or (lambda: None)
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    def _headers(self) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": f"obsmem/{__version__}",
        }
        key = self._api_key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _http(self) -> httpx.AsyncClient:
        # Created on the loop thread and used only there.
        if self._client is None:
            self._client = httpx.AsyncClient(follow_redirects=False, trust_env=False, transport=self._transport)
        return self._client

    async def _exchange(self, body: bytes, correlation_id: str, within: float) -> Reply:
        """One request with ``within`` seconds for all of it; OutboundError on any failure."""
        deadline = time.monotonic() + within
        connect = within if self.connect_timeout_seconds is None else min(self.connect_timeout_seconds, within)
        timeout = httpx.Timeout(within, connect=connect)
        try:
            async with asyncio.timeout(within):
                request = self._http().stream("POST", self.url, content=body, headers=self._headers(), timeout=timeout)
                async with request as answer:
                    received = bytearray()
                    if answer.status_code == 200:
                        async for piece in answer.aiter_bytes():
                            received += piece
                            if len(received) > self.max_response_bytes:
                                raise OutboundError("too_large", f"{self.label} reply is too large", correlation_id)
                    return Reply(answer.status_code, answer.headers, bytes(received))
        except OutboundError:
            raise
        except (TimeoutError, httpx.TimeoutException) as exc:
            if time.monotonic() < deadline and isinstance(exc, httpx.TimeoutException):
                # Only the connect bound fires before the deadline: the host did not accept in time.
                raise self._unreachable(exc, correlation_id) from None
            raise OutboundError(
                "timeout", f"{self.label} did not answer within {self.timeout_seconds:g} s", correlation_id
            ) from None
        except httpx.HTTPError as exc:
            raise self._unreachable(exc, correlation_id) from None

    def _unreachable(self, exc: Exception, correlation_id: str) -> OutboundError:
        cause = type(exc).__name__
        return OutboundError("connect", f"cannot reach {self.label} ({cause})", correlation_id, cause=cause)

    async def _one(self, body: bytes, correlation_id: str, within: float) -> Reply:
        """One request as the callers of :meth:`send_many` want it; subclasses add their checks."""
        return await self._exchange(body, correlation_id, within)

    def send(self, body: bytes, *, within: float | None = None, correlation_id: str | None = None) -> Reply:
        """One request, given ``within`` seconds (default: the endpoint's whole deadline)."""
        seconds = self.timeout_seconds if within is None else within
        cid = correlation_id or new_correlation_id()
        return self._run(self._one(body, cid, seconds), cid, seconds)

    def send_many(
        self, bodies: Sequence[bytes], *, concurrency: int = 1, correlation_id: str | None = None
    ) -> list[Reply]:
        """Several requests (at most ``concurrency`` at once), each with the whole deadline; the first error
        is raised and the rest are cancelled."""
        cid = correlation_id or new_correlation_id()
        gate_size = max(1, concurrency)

        async def run() -> list[Reply]:
            gate = asyncio.Semaphore(gate_size)

            async def one(body: bytes) -> Reply:
                async with gate:
                    return await self._one(body, cid, self.timeout_seconds)

            tasks = [asyncio.ensure_future(one(body)) for body in bodies]
            try:
                return list(await asyncio.gather(*tasks))
            finally:
                for task in tasks:
                    task.cancel()

        rounds = -(-len(bodies) // gate_size)
        return self._run(run(), cid, self.timeout_seconds * max(1, rounds))

    def _run(self, work: Any, correlation_id: str, seconds: float) -> Any:
        try:
            return run_on_loop(work, seconds)  # each request enforces its own deadline
        except TimeoutError:
            raise OutboundError("timeout", f"{self.label} did not answer in time", correlation_id) from None

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):  # closing is best effort
                asyncio.run_coroutine_threadsafe(client.aclose(), _LOOP.loop()).result(timeout=5)


class JsonEndpoint(Endpoint):
    """``POST <base_url><path>`` with a JSON body, returning the parsed JSON reply; any status but 200 is an
    error. Failures are logged by stage and correlation id only."""

    def __init__(
        self,
        base_url: str,
        path: str,
        *,
        timeout_seconds: float,
        api_key_env: str | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        label: str = "endpoint",
    ) -> None:
        super().__init__(
            base_url.rstrip("/") + path,
            timeout_seconds=timeout_seconds,
            api_key=key_from_environment(api_key_env),
            max_response_bytes=max_response_bytes,
            label=label,
        )

    async def _one(self, body: bytes, correlation_id: str, within: float) -> Reply:
        reply = await self._exchange(body, correlation_id, within)
        if reply.status != 200:
            raise OutboundError("status", f"{self.label} answered HTTP {reply.status}", correlation_id)
        return reply

    def post(self, payload: Any) -> Any:
        return self.post_many([payload], concurrency=1)[0]

    def post_many(self, payloads: Sequence[Any], *, concurrency: int = 1) -> list[Any]:
        """Send several requests (at most ``concurrency`` at once); all succeed or the first error is raised."""
        bodies = [json.dumps(payload, ensure_ascii=False).encode("utf-8") for payload in payloads]
        correlation_id = new_correlation_id()
        try:
            replies = self.send_many(bodies, concurrency=concurrency, correlation_id=correlation_id)
            return [self._parsed(reply, correlation_id) for reply in replies]
        except OutboundError as exc:
            log.warning("%s request failed: stage=%s correlation_id=%s", self.label, exc.stage, exc.correlation_id)
            raise

    def _parsed(self, reply: Reply, correlation_id: str) -> Any:
        try:
            return json.loads(reply.body)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser follows
            raise OutboundError("malformed", f"{self.label} reply is not JSON", correlation_id) from None
