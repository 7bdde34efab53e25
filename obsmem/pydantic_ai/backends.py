"""The two ways the capability reaches obsmem, behind one small protocol.

:class:`EmbeddedMemory` calls an :class:`~obsmem.Obsmem` in this process (its workers observe in
background threads, and pydantic-ai models can serve as its Observer and Reflector); :class:`RemoteMemory`
calls an ``obsmem serve`` over HTTP with an :class:`ObsmemClient` (the server's configured models observe).
Both are synchronous and thread-safe: the capability calls them from worker threads, never on the event
loop. Errors are :class:`~obsmem.errors.ObsmemError` with the server's stable code in both modes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

import httpx

from obsmem.app import Obsmem, check_search
from obsmem.errors import NotFound, ObsmemError, ServiceUnavailable
from obsmem.ids import parse_id_prefix
from obsmem.json_shape import strict_dumps
from obsmem.outbound import run_on_loop
from obsmem.pydantic_ai.messages import event_bytes, fit_event
from obsmem.pydantic_ai.remote_notes import RemoteNotes
from obsmem.storage import lock_wait_bound
from obsmem.surfaces.tool_memory import MEMORY, run_memory_tool
from obsmem.surfaces.tools import MEMORY_SEARCH, TOOL_NAMES, parse_tool_arguments, run_tool
from obsmem.validation import session_id as check_session_id

log = logging.getLogger("obsmem.pydantic_ai")

DEFAULT_HTTP_TIMEOUT_SECONDS = 30.0
# Most bytes of events one append request carries (a larger event goes alone): far under the server's
# default body limit (``server.max_body_bytes``, 8 MiB), which a run's large tool outputs together can pass;
# a body over it is refused at every retry, and nothing of the session after it would ever be stored.
APPEND_BODY_BYTES = 512 * 1024
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024  # the server's default ``server.max_body_bytes``
MIN_MAX_BODY_BYTES = 16 * 1024  # room for any event's fixed fields (a tool name and call id of 256 characters)
# A body's bytes besides its events: ``{"events":[`` and ``]}``.
BODY_ENVELOPE_BYTES = 16


@dataclass(frozen=True)
class ProjectionView:
    """The projection as the capability needs it: the text and exactly which events it covers."""

    text: str
    tokens: int
    observed_through_seq: int
    generation: int
    observations: int
    reflections: int

    @classmethod
    def empty(cls) -> ProjectionView:
        return cls("", 0, 0, 0, 0, 0)

    @classmethod
    def from_dict(cls, body: dict[str, Any]) -> ProjectionView:
        return cls(
            text=str(body["text"]),
            tokens=int(body["tokens"]),
            observed_through_seq=int(body["observed_through_seq"]),
            generation=int(body["generation"]),
            observations=int(body["observations"]),
            reflections=int(body["reflections"]),
        )


class MemoryBackend(Protocol):
    """What the capability asks of obsmem, for one project and session."""

    project: str
    session_id: str
    remote: bool

    def last_seq(self, timeout: float | None = None) -> int:
        """The session's last event seq (0: no events yet).

        ``timeout`` (here and in :meth:`append`): the most seconds the call may take, where the backend can
        bound it (over HTTP; an embedded append's wait for a busy SQLite database); None: its usual bound (the
        client's timeout, the database's busy timeout)."""
        ...

    def append(self, events: list[dict[str, Any]], timeout: float | None = None) -> None: ...

    def projection(self, timeout: float | None = None) -> ProjectionView:
        """The session's projection. ``timeout`` here, in :meth:`request_observation` and :meth:`events_after`:
        as in :meth:`last_seq`, bounded over HTTP (flush's one deadline); embedded, these are local reads."""
        ...

    def status(self) -> dict[str, Any]: ...

    def request_observation(self, timeout: float | None = None) -> None: ...

    def request_reflection(self) -> None: ...

    def events_after(self, after_id: int, limit: int = 200, timeout: float | None = None) -> list[dict[str, Any]]:
        """The session's om_* events with a larger log id, oldest first."""
        ...

    def run_tool(self, name: str, arguments: dict[str, Any] | str | None) -> str:
        """A memory tool call's text for the model: the result as JSON, or ``"<code>: <message>"``."""
        ...

    def search_mode(self) -> str: ...

    def groom(self) -> dict[str, Any]:
        """One groom pass for the project: ``{"promoted": [...], "escalated": [...]}`` (docs/trust.md)."""
        ...

    def switch_model(self, role: str, model_id: str | None, context_window_tokens: int | None = None) -> None: ...


class EmbeddedMemory:
    """An :class:`~obsmem.Obsmem` in this process."""

    remote = False

    def __init__(self, memory: Obsmem, project: str, session_id: str) -> None:
        self.memory = memory
        self.project = project
        self.session_id = session_id
        self._cached: tuple[str, ProjectionView] | None = None
        self._appends_wait_until: float | None = None  # see stop_waiting_at

    def last_seq(self, timeout: float | None = None) -> int:
        try:
            return self.memory.session_status(self.project, self.session_id).last_seq
        except NotFound:
            return 0

    def append(self, events: list[dict[str, Any]], timeout: float | None = None) -> None:
        """Append; while another writer holds the database's lock, wait ``timeout`` seconds at most (None: the
        busy timeout), and never past :meth:`stop_waiting_at`'s time, then fail with ``storage_busy``, storing
        nothing. (On PostgreSQL an append waits for its locks as that backend does.)"""
        own = None if timeout is None else time.monotonic() + timeout

        def until() -> float | None:
            bounds = [bound for bound in (own, self._appends_wait_until) if bound is not None]
            return min(bounds) if bounds else None

        with lock_wait_bound(until):
            self.memory.append_events(self.project, self.session_id, events)

    def stop_waiting_at(self, deadline: float) -> None:
        """From the monotonic time ``deadline`` on, appends (one waiting already too) stop waiting for a busy
        database: the capability's ``close()`` returns in its time, and its append thread with it."""
        self._appends_wait_until = deadline

    def projection(self, timeout: float | None = None) -> ProjectionView:
        """The projection, rendered again only when its version changed (rendering a large memory takes
        milliseconds; the version is a few index reads)."""
        try:
            version = self.memory.memory_version(self.project, self.session_id)
            if self._cached is not None and self._cached[0] == version:
                return self._cached[1]
            view = ProjectionView.from_dict(self.memory.memory(self.project, self.session_id).to_dict())
        except NotFound:  # the first append (made in the background) has not created the project yet
            return ProjectionView.empty()
        # The version read before the rendering: a change in between renders again next time, never less.
        self._cached = (version, view)
        return view

    def status(self) -> dict[str, Any]:
        return self.memory.session_status(self.project, self.session_id).to_dict()

    def request_observation(self, timeout: float | None = None) -> None:
        self.memory.observe(self.project, self.session_id)

    def request_reflection(self) -> None:
        self.memory.reflect(self.project, self.session_id)

    def events_after(self, after_id: int, limit: int = 200, timeout: float | None = None) -> list[dict[str, Any]]:
        try:
            events = self.memory.pipeline_events(self.project, after=after_id, limit=limit, session_id=self.session_id)
        except NotFound:  # no project yet: no events either
            return []
        return [event.to_dict() for event in events]

    def run_tool(self, name: str, arguments: dict[str, Any] | str | None) -> str:
        return run_tool(self.memory, self.project, name, arguments, session_id=self.session_id).text

    def search_mode(self) -> str:
        return self.memory.default_mode

    def groom(self) -> dict[str, Any]:
        return self.memory.groom(self.project).to_dict()

    def switch_model(self, role: str, model_id: str | None, context_window_tokens: int | None = None) -> None:
        change = None if model_id is None else {"model_id": model_id, "context_window_tokens": context_window_tokens}
        self.memory.switch_models(self.project, {role: change})


class ObsmemClient:
    """An ``obsmem serve`` reached over HTTP: its base URL and, when it has keys, an API key.

    The key goes in the Authorization header only; redirects are not followed, so it never reaches another
    host. ``timeout_seconds`` bounds each call whole (connect, send, wait and the answer's last byte): httpx's
    own timeouts bound each network operation only, so a server or proxy that drips its answer a byte at a
    time would keep a call, and the agent's run waiting on it, for as long as it dripped. The calls run on
    obsmem's outbound loop thread (:func:`obsmem.outbound.run_on_loop`); callers stay synchronous, on any
    thread. ``max_body_bytes`` is the server's ``server.max_body_bytes`` (its default, 8 MiB, unless told): an
    event whose JSON would not fit in a body that large is cut to fit before it is posted. A server that refuses
    a body as too large (413) has a lower limit than that: its events are cut to fit half the size, down to
    :data:`MIN_MAX_BODY_BYTES`, until it takes them (:attr:`body_budget`, logged once). Pass ``transport``
    (an async httpx transport, e.g. ``httpx.ASGITransport``) to run against an in-process app in tests.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_seconds: float = DEFAULT_HTTP_TIMEOUT_SECONDS,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError("base_url must be an http:// or https:// URL")
        if (
            isinstance(timeout_seconds, bool)
            or not isinstance(timeout_seconds, int | float)
            or not math.isfinite(timeout_seconds)  # NaN timed out every call at once; infinity overflowed the loop
            or timeout_seconds <= 0
        ):
            raise ValueError("timeout_seconds must be a positive number")
        if type(max_body_bytes) is not int or max_body_bytes < MIN_MAX_BODY_BYTES:
            raise ValueError(f"max_body_bytes must be a whole number of bytes, at least {MIN_MAX_BODY_BYTES}")
        self.base_url = base_url.rstrip("/")
        self.timeout_seconds = float(timeout_seconds)
        self.max_body_bytes = max_body_bytes
        # The body size events are cut to fit: max_body_bytes, until the server refuses one that large.
        self.body_budget = max_body_bytes
        self._budget_lock = threading.Lock()
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._transport = transport
        self._http: httpx.AsyncClient | None = None  # made and used on the loop thread only

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(
                base_url=f"{self.base_url}/v1",
                headers=self._headers,
                timeout=self.timeout_seconds,
                follow_redirects=False,
                transport=self._transport,
            )
        return self._http

    async def _request(self, method: str, path: str, kwargs: dict[str, Any], seconds: float) -> httpx.Response:
        async with asyncio.timeout(seconds):
            return await self._client().request(method, path, **kwargs)

    def call(self, method: str, path: str, *, timeout: float | None = None, **kwargs: Any) -> Any:
        """One request, bounded whole by the client's timeout or by ``timeout`` seconds when less (a caller with
        a deadline of its own passes the time it has left; none left: refused unsent, as a timeout)."""
        seconds = self.timeout_seconds if timeout is None else min(self.timeout_seconds, timeout)
        try:
            if seconds <= 0:
                raise TimeoutError
            response = run_on_loop(self._request(method, path, kwargs, seconds), seconds)
        except (httpx.HTTPError, TimeoutError) as exc:
            raise ServiceUnavailable(f"the obsmem server cannot be reached ({type(exc).__name__})") from None
        if response.status_code >= 400:
            raise _server_error(response)
        try:
            return response.json()
        except ValueError:  # e.g. a proxy's HTML page in front of the URL: the server is not reachable as obsmem
            raise ServiceUnavailable(f"the obsmem server's answer (HTTP {response.status_code}) is not JSON") from None

    def lower_body_budget(self, refused: int, server_limit: int | None = None) -> bool:
        """The server refused (413) a body cut to fit ``refused`` bytes: from now on cut to the limit it named
        (``server_limit``), or to half ``refused`` from a server that names none, not below
        :data:`MIN_MAX_BODY_BYTES`. False when no smaller budget is left to try (the refusal is final).

        The server's own limit is preferred to halving: an event stored whole before the budget fell is within
        that limit, so it is sent again whole, not cut to a budget below it and refused as a seq_conflict."""
        with self._budget_lock:
            if self.body_budget < refused:  # another append lowered it meanwhile
                return True
            if refused <= MIN_MAX_BODY_BYTES:
                return False
            lower = refused // 2 if server_limit is None or server_limit >= refused else server_limit
            first = self.body_budget == self.max_body_bytes
            self.body_budget = max(MIN_MAX_BODY_BYTES, lower)
        if first:
            log.warning(
                "the obsmem server refused a request body as too large (payload_too_large): its "
                "server.max_body_bytes is lower than this client's max_body_bytes (%d); events are now cut to "
                "fit smaller bodies",
                self.max_body_bytes,
            )
        return True

    def close(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            with contextlib.suppress(Exception):  # closing is best effort
                run_on_loop(http.aclose(), 5.0)


def _server_error(response: httpx.Response) -> ObsmemError:
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "service_unavailable", f"the obsmem server answered HTTP {response.status_code}"
    failure = NotFound(message, code=code) if response.status_code == 404 else ObsmemError(message, code=code)
    failure.status = response.status_code
    limit = _server_limit(response) if response.status_code == 413 else None
    if limit is not None:
        failure.details = {"max_body_bytes": limit}
    return failure


def _server_limit(response: httpx.Response) -> int | None:
    """The body limit a 413 names (``error.max_body_bytes``), or None from a server that names none."""
    try:
        limit = response.json()["error"]["max_body_bytes"]
    except (ValueError, KeyError, TypeError):
        return None
    return limit if type(limit) is int and limit > 0 else None


def _body_sized(events: list[dict[str, Any]], budget: int) -> list[list[dict[str, Any]]]:
    """``events`` in consecutive parts whose JSON (as httpx writes it) holds at most ``budget`` bytes, each part
    at least one event."""
    parts: list[list[dict[str, Any]]] = []
    part: list[dict[str, Any]] = []
    size = 0
    for event in events:
        event_size = event_bytes(event)
        if part and size + event_size > budget:
            parts.append(part)
            part, size = [], 0
        part.append(event)
        size += event_size
    if part:
        parts.append(part)
    return parts


def _segment(value: str) -> str:
    """``value`` as one URL path segment: ``/``, ``?``, ``#`` and ``%`` are percent-encoded, so no value can end
    its segment, add one, or climb out of its project."""
    return quote(value, safe="")


class RemoteMemory:
    """An ``obsmem serve``, through an :class:`ObsmemClient`."""

    remote = True

    def __init__(self, client: ObsmemClient, project: str, session_id: str, *, mode: str = "exact") -> None:
        self.client = client
        self.project = project
        self.session_id = session_id
        self.mode = mode
        # Both were validated at construction; quoted anyway, so no value can ever add a path segment.
        self._project = f"/projects/{_segment(project)}"
        self._session = f"{self._project}/sessions/{_segment(session_id)}"

    def last_seq(self, timeout: float | None = None) -> int:
        try:
            return int(self.client.call("GET", f"{self._session}/status", timeout=timeout)["last_seq"])
        except NotFound as exc:
            if exc.code in ("session_not_found", "project_not_found"):
                return 0
            raise

    def append(self, events: list[dict[str, Any]], timeout: float | None = None) -> None:
        """Append in order, in requests of at most :data:`APPEND_BODY_BYTES` each (an event larger goes alone);
        a request that fails leaves the ones before it stored, and the retry answers those as duplicates. An
        event too large for the server's body limit on its own is cut to fit it
        (:func:`~obsmem.pydantic_ai.messages.fit_event`). A request the server refuses as too large (413: its
        limit is lower than the client was told) is sent again with the events not stored yet cut to fit half
        the size (:meth:`ObsmemClient.lower_body_budget`); at the smallest, the 413 is raised. ``timeout``
        bounds all the requests together: each is given only the time left."""
        deadline = None if timeout is None else time.monotonic() + timeout
        stored = 0
        while True:
            budget = self.client.body_budget
            largest = budget - BODY_ENVELOPE_BYTES
            fitted = [fit_event(event, largest) for event in events[stored:]]
            try:
                for part in _body_sized(fitted, min(APPEND_BODY_BYTES, largest)):
                    left = None if deadline is None else deadline - time.monotonic()
                    self.client.call("POST", f"{self._session}/events", json={"events": part}, timeout=left)
                    stored += len(part)
                return
            except ObsmemError as exc:
                limit = exc.details.get("max_body_bytes")
                if exc.status != 413 or not self.client.lower_body_budget(budget, limit):
                    raise

    def projection(self, timeout: float | None = None) -> ProjectionView:
        try:
            return ProjectionView.from_dict(self.client.call("GET", f"{self._session}/memory", timeout=timeout))
        except NotFound:  # the first append (made in the background) has not created the project yet
            return ProjectionView.empty()

    def status(self) -> dict[str, Any]:
        return dict(self.client.call("GET", f"{self._session}/status"))

    def request_observation(self, timeout: float | None = None) -> None:
        self.client.call("POST", f"{self._session}/observe", timeout=timeout)

    def request_reflection(self) -> None:
        self.client.call("POST", f"{self._session}/reflect")

    def events_after(self, after_id: int, limit: int = 200, timeout: float | None = None) -> list[dict[str, Any]]:
        params = {"after_id": after_id, "limit": min(limit, 1000), "session_id": self.session_id}
        try:
            return list(self.client.call("GET", f"{self._project}/events", params=params, timeout=timeout)["events"])
        except NotFound:  # no project yet: no events either
            return []

    def run_tool(self, name: str, arguments: dict[str, Any] | str | None) -> str:
        """The same arguments, scope and error texts as the embedded tools, over the HTTP routes."""
        if name not in TOOL_NAMES:
            return f"unknown_tool: there is no tool with that name; tools: {', '.join(TOOL_NAMES)}"
        try:
            args = parse_tool_arguments(name, arguments)
            if name == MEMORY_SEARCH:
                if "query" not in args:
                    return "invalid_query: query is required"
                # Checked here by the embedded search's own code: the HTTP API's schema would meet some mistakes
                # first and word them its way. The server checks again (its search limits may be narrower,
                # and then it answers in these same words).
                check_search(**args, default_mode=self.mode)
                result = self.client.call("POST", f"{self._project}/search", json=args)
            elif name == MEMORY:
                result = run_memory_tool(RemoteNotes(self.client), self.project, args, user=None)
            else:  # recall
                if "id" not in args:
                    return "invalid_id: id is required: a memory id from memory_search"
                scope = args.get("session_id", self.session_id)
                if not isinstance(scope, str):
                    return "invalid_session: session_id must be a string"
                # The id comes from the model: checked against obsmem's id rules and quoted before it becomes
                # a path segment, so an id such as ``../../other/memories/x`` cannot reach another project.
                memory_id = _segment(parse_id_prefix(args["id"]))
                # The session too, as the embedded recall checks it: text httpx cannot put in a URL (a lone
                # surrogate, tens of kilobytes) raised out of the tool instead of answering the model.
                check_session_id(scope)
                result = self.client.call("GET", f"{self._project}/memories/{memory_id}", params={"session_id": scope})
        except ObsmemError as exc:
            return f"{exc.code}: {exc.message}"
        return strict_dumps(result, ensure_ascii=False)

    def search_mode(self) -> str:
        return self.mode

    def groom(self) -> dict[str, Any]:
        return dict(self.client.call("POST", f"{self._project}/groom"))

    def switch_model(self, role: str, model_id: str | None, context_window_tokens: int | None = None) -> None:
        change = None if model_id is None else {"model_id": model_id}
        if change is not None and context_window_tokens is not None:
            change["context_window_tokens"] = context_window_tokens  # type: ignore[assignment]
        self.client.call("PUT", f"{self._project}/models", json={role: change})
