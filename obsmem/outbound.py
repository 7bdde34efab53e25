"""Outbound JSON requests (embedding and rerank endpoints) with an overall deadline.

httpx's timeouts bound each network operation, not a whole request: a server that drips one byte per
second never trips a read timeout. So requests run as coroutines on one private event-loop thread,
inside ``asyncio.timeout(deadline)``, which cancels the request (and closes its connection) when the
deadline passes, whatever the server is doing. Callers stay synchronous and may be on any thread.

Other rules for every outbound call: no redirects (a 3xx is an error, so a key never follows a redirect
to another host), the key only in the ``Authorization`` header, a cap on the response size, and errors
and logs that name the failure stage and a correlation id, never the payload, the response body or the
key. :class:`OutboundError` carries only those safe fields and is raised without a chained cause.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import uuid
from collections.abc import Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import httpx

log = logging.getLogger("obsmem.outbound")

MAX_RESPONSE_BYTES = 64 * 1024 * 1024


class OutboundError(Exception):
    """A request failed. ``stage``: connect, timeout, status, too_large or malformed."""

    def __init__(self, stage: str, message: str, correlation_id: str) -> None:
        super().__init__(message)
        self.stage = stage
        self.message = message
        self.correlation_id = correlation_id


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


class JsonEndpoint:
    """``POST <base_url><path>`` with a JSON body, returning the parsed JSON reply."""

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
        self.url = base_url.rstrip("/") + path
        self.timeout_seconds = timeout_seconds
        self.api_key_env = api_key_env
        self.max_response_bytes = max_response_bytes
        self.label = label
        self._client: httpx.AsyncClient | None = None

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _http(self) -> httpx.AsyncClient:
        # Created on the loop thread, used only there.
        if self._client is None:
            timeout = httpx.Timeout(self.timeout_seconds)
            self._client = httpx.AsyncClient(timeout=timeout, follow_redirects=False, trust_env=False)
        return self._client

    async def _post(self, payload: Any, correlation_id: str) -> Any:
        body = bytearray()
        try:
            async with asyncio.timeout(self.timeout_seconds):
                async with self._http().stream("POST", self.url, json=payload, headers=self._headers()) as reply:
                    if reply.status_code != 200:
                        raise OutboundError("status", f"{self.label} answered HTTP {reply.status_code}", correlation_id)
                    async for piece in reply.aiter_bytes():
                        body += piece
                        if len(body) > self.max_response_bytes:
                            raise OutboundError("too_large", f"{self.label} reply is too large", correlation_id)
        except OutboundError:
            raise
        except TimeoutError:
            raise OutboundError(
                "timeout", f"{self.label} did not answer within {self.timeout_seconds:g} s", correlation_id
            ) from None
        except httpx.TimeoutException:
            raise OutboundError(
                "timeout", f"{self.label} did not answer within {self.timeout_seconds:g} s", correlation_id
            ) from None
        except httpx.HTTPError as exc:
            raise OutboundError(
                "connect", f"cannot reach {self.label} ({type(exc).__name__})", correlation_id
            ) from None
        try:
            return json.loads(body)
        except ValueError:
            raise OutboundError("malformed", f"{self.label} reply is not JSON", correlation_id) from None

    def post(self, payload: Any) -> Any:
        return self.post_many([payload], concurrency=1)[0]

    def post_many(self, payloads: Sequence[Any], *, concurrency: int = 1) -> list[Any]:
        """Send several requests (at most ``concurrency`` at once); all succeed or the first error is raised."""
        correlation_id = uuid.uuid4().hex[:12]

        async def run() -> list[Any]:
            gate = asyncio.Semaphore(max(1, concurrency))

            async def one(payload: Any) -> Any:
                async with gate:
                    return await self._post(payload, correlation_id)

            tasks = [asyncio.ensure_future(one(payload)) for payload in payloads]
            try:
                return list(await asyncio.gather(*tasks))
            finally:
                for task in tasks:
                    task.cancel()

        future = asyncio.run_coroutine_threadsafe(run(), _LOOP.loop())
        try:
            # Each request enforces its own deadline; this bound only guards against a wedged loop.
            rounds = -(-len(payloads) // max(1, concurrency))
            return future.result(timeout=self.timeout_seconds * rounds + 5)
        except OutboundError as exc:
            log.warning("%s request failed: stage=%s correlation_id=%s", self.label, exc.stage, correlation_id)
            raise
        except FutureTimeout:
            future.cancel()
            log.warning("%s request failed: stage=timeout correlation_id=%s", self.label, correlation_id)
            raise OutboundError("timeout", f"{self.label} did not answer in time", correlation_id) from None

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):  # closing is best effort
                asyncio.run_coroutine_threadsafe(client.aclose(), _LOOP.loop()).result(timeout=5)
