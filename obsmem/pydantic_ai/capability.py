"""``ObservationalMemory``: obsmem as a pydantic-ai capability.

Before every model request of a run it:

1. **observes**: the run's messages not appended yet go to the session as events, each at a seq derived
   from its position (:mod:`obsmem.pydantic_ai.messages`), in the background and in order, so appends
   are idempotent across runs that pass ``message_history`` and across processes; a failed append goes
   again with the next request, and when none follows, :meth:`~ObservationalMemory.close` (or ``flush``)
   sends it again, within a bounded time, and logs how many events are still not stored;
2. **compacts**: the messages the session's watermark covers are replaced by one message carrying the
   projection (:mod:`obsmem.pydantic_ai.compaction`); the run's own history is left as it is;
3. **keeps the pipeline moving**: background observation is asked for once the unobserved tail reaches the
   buffer, reflection once the memory passes the reflection threshold (:mod:`obsmem.pydantic_ai.thresholds`);
4. **checks the window**: when the request would still not fit, it waits (bounded) for the running
   observation, compacts again, and reports an ``om_overflow`` event if it still does not fit; it never
   drops a message silently;
5. **reports**: ``om_status`` and ``om_activation``, and the pipeline's own events as they are logged
   (:mod:`obsmem.pydantic_ai.events`).

The first run of a capability starts its session, and with it one groom pass for the project (candidate
notes whose judgments resolved true become trusted, docs/trust.md), on a thread of its own: the run never
waits for it, and its outcome is an ``om_groom`` (or ``om_groom_failed``) event.

Nothing here waits for a model on the request path except that last resort: observation and reflection
run on obsmem's workers (an embedded ``Obsmem``'s threads, or the server).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model, ModelRequestContext
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import AbstractToolset

from obsmem.app import Obsmem
from obsmem.errors import ConfigurationError, NotFound, ObsmemError, SeqConflict
from obsmem.events import MAX_BATCH
from obsmem.pipeline import estimate_tokens
from obsmem.pydantic_ai.backends import EmbeddedMemory, MemoryBackend, ObsmemClient, ProjectionView, RemoteMemory
from obsmem.pydantic_ai.compaction import Compaction, compact
from obsmem.pydantic_ai.events import PIPELINE_EVENTS, EventHub, Handler, OMEvent, from_logged, mastra_companions
from obsmem.pydantic_ai.messages import EventLedger, arguments_cut
from obsmem.pydantic_ai.model_client import PydanticAIChatModel, resolve_model
from obsmem.pydantic_ai.thresholds import (
    MIN_CONTEXT_WINDOW,
    MIN_THRESHOLD,
    Thresholds,
    check_tokens,
    resolve_thresholds,
)
from obsmem.pydantic_ai.tools import memory_toolset
from obsmem.validation import project_name
from obsmem.validation import session_id as check_session_id

log = logging.getLogger("obsmem.pydantic_ai")
_T = TypeVar("_T")

# What obsmem answers while it cannot serve (unreachable or restarting, storage faults, timeouts): a request
# goes on with the memory it read last rather than failing the agent's run.
UNAVAILABLE_STATUSES = (502, 503, 504)
OUTPUT_RESERVE_FRACTION = 0.10  # of the window, kept free for the model's answer
OVERFLOW_POLL_SECONDS = 0.05
REOBSERVE_AFTER_SECONDS = 30.0  # ask again if an observation request seems lost
CLOSE_TIMEOUT_SECONDS = 10.0  # how long close() may spend storing what failed appends left unsent
# Pauses between close()'s (and flush()'s) attempts at it: five attempts at most, a server that restarts
# within about seven seconds is caught by one of them.
STORE_AGAIN_PAUSES_SECONDS = (0.5, 1.0, 2.0, 4.0)
STORE_GRACE_SECONDS = 0.5  # past the deadline, for the answer of an attempt the deadline bounds
POLLER_TASK_NAME = "obsmem-pydantic-ai-events"


class ObservationalMemory(AbstractCapability[Any]):
    """Observational memory for a pydantic-ai agent, backed by an embedded ``Obsmem`` or an obsmem server.

    ``memory_or_client`` is an :class:`~obsmem.Obsmem` (embedded) or an :class:`ObsmemClient` (remote);
    ``memory=`` and ``client=`` name the same thing explicitly. One session per capability: pass the same
    ``session_id`` (and the run's ``message_history``) to continue a conversation in another process.
    """

    def __init__(
        self,
        memory_or_client: Obsmem | ObsmemClient | None = None,
        *,
        memory: Obsmem | None = None,
        client: ObsmemClient | None = None,
        project: str,
        session_id: str,
        observer_model: Model | str | None = None,
        reflector_model: Model | str | None = None,
        observation_threshold: int | None = None,
        reflection_threshold: int | None = None,
        context_window: int | None = None,
        tools: bool = True,
        event_handler: Handler | None = None,
        include_observations: bool = False,
        overflow_wait_seconds: float = 30.0,
        poll_seconds: float = 0.25,
        start_workers: bool = True,
        search_mode: str | None = None,
    ) -> None:
        given = [item for item in (memory_or_client, memory, client) if item is not None]
        if len(given) != 1:
            raise ConfigurationError(
                "give exactly one of: an Obsmem (embedded) or an ObsmemClient (remote)"
                + (" - both were given" if len(given) > 1 else "")
            )
        target = given[0]
        project = project_name(project)
        session_id = check_session_id(session_id)
        self._observation_threshold = check_tokens("observation_threshold", observation_threshold, MIN_THRESHOLD)
        self._reflection_threshold = check_tokens("reflection_threshold", reflection_threshold, MIN_THRESHOLD)
        self._context_window = check_tokens("context_window", context_window, MIN_CONTEXT_WINDOW)
        if self._context_window is not None:  # fail now, not in the first request, if they cannot fit
            resolve_thresholds(
                profile_window=None,
                context_window=self._context_window,
                observation=self._observation_threshold,
                reflection=self._reflection_threshold,
            )
        if event_handler is not None and not callable(event_handler):
            raise ConfigurationError("event_handler must be a callable that takes an OMEvent")
        if isinstance(overflow_wait_seconds, bool) or not 0 <= overflow_wait_seconds <= 3600:
            raise ConfigurationError("overflow_wait_seconds must be from 0 to 3600")
        if isinstance(poll_seconds, bool) or not 0.01 <= poll_seconds <= 60:
            raise ConfigurationError("poll_seconds must be from 0.01 to 60")
        self.backend: MemoryBackend
        self._routed: dict[str, PydanticAIChatModel] = {}
        if isinstance(target, Obsmem):
            self.backend = EmbeddedMemory(target, project, session_id)
            self._route("observer", observer_model)
            self._route("reflector", reflector_model)
            if start_workers and (target.workers is None or not target.workers.running):
                target.start_workers()
        elif isinstance(target, ObsmemClient):
            if observer_model is not None or reflector_model is not None:
                raise ConfigurationError(
                    "observer_model and reflector_model run the models of an embedded Obsmem; an obsmem server "
                    "uses its configured models: call switch_observer_model / switch_reflector_model with a "
                    "model id to change them"
                )
            self.backend = RemoteMemory(target, project, session_id, mode=search_mode or "exact")
        else:
            raise ConfigurationError("memory_or_client must be an obsmem Obsmem or an ObsmemClient")
        self.project, self.session_id = project, session_id
        self.tools_enabled = tools
        self.include_observations = include_observations
        self.overflow_wait_seconds = float(overflow_wait_seconds)
        self.poll_seconds = float(poll_seconds)
        self.hub = EventHub(event_handler)
        self.ledger = EventLedger()
        self._ledger_messages = 0
        self._appender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="obsmem-append")
        self._groomer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="obsmem-groom")
        self._groom: Future[dict[str, Any]] | None = None  # the session start's groom pass, once started
        self._groom_ms = 0
        self._groom_reported = False
        self._groom_report_task: asyncio.Task[None] | None = None
        # The session start's groom pass, once it answered: ``{"promoted": [...], "escalated": [...]}``.
        self.last_groom: dict[str, Any] | None = None
        self._append: Future[None] | None = None
        self._append_error: BaseException | None = None
        self._appended_through: int | None = None  # None: not checked against the store yet
        self._stored_through: int | None = None  # how many of the history's events the store is known to hold
        self._append_failure: str | None = None  # the error code of the latest append, until one succeeds
        self._unsent_warned: tuple[int, int, int] | None = None  # the unsent batch last logged (see _warn_unsent)
        self._closed = False
        self._lock = asyncio.Lock()
        self._event_cursor: int | None = None  # None: not primed (old events of a resumed session are skipped)
        self._poller: asyncio.Task[None] | None = None  # one task, on the loop of the latest run, until close()
        self._cursor_lock = threading.Lock()
        self._observe_requested: tuple[int, float] = (0, 0.0)  # (through seq, when)
        self._reflect_requested: tuple[int, int] | None = None  # (generation, observations) asked about
        self._activated_through = 0
        self._cycles_since_activation = 0
        self._observing: set[str] = set()  # cycles started and not ended
        self._known_observations: set[str] | None = None
        self._last_thresholds = self._thresholds(None)
        self._search_mode = search_mode
        self._refusals: set[str] = set()  # error codes of pipeline requests and projection reads already logged
        self._projection_read: ProjectionView | None = None  # the newest a request read, for when obsmem is away
        self._memory_moved = False  # a cycle ended since the poller last rendered the memory
        self._verify = True  # the next request waits for its append: the history is checked against the store
        # What the latest model request was measured against and sent (for inspection and benchmarks).
        self.last_compaction: Compaction | None = None
        self.last_projection: ProjectionView | None = None

    # -- configuration -------------------------------------------------------------------------

    def _route(self, role: str, model: Model | str | None) -> None:
        """Run ``role`` (and the Dropper with the Reflector) on a pydantic-ai model for this project."""
        if model is None:
            return
        try:
            resolved = resolve_model(model)
        except (UserError, ValueError, ImportError) as exc:
            name = model if isinstance(model, str) and len(model) <= 200 else "the model given"
            raise ConfigurationError(f"{role}_model: pydantic-ai cannot use {name!r} ({type(exc).__name__})") from None
        assert isinstance(self.backend, EmbeddedMemory)
        for pipeline_role in ("reflector", "dropper") if role == "reflector" else (role,):
            adapter = PydanticAIChatModel(resolved, role=pipeline_role)
            previous = self._routed.pop(pipeline_role, None)
            self.backend.memory.route_model(self.backend.project, pipeline_role, adapter)
            self._routed[pipeline_role] = adapter
            if previous is not None:
                self.backend.memory.unroute_model(self.backend.project, pipeline_role, previous)
                previous.retire()  # a job in flight on it finishes there; it closes when that has ended

    def _thresholds(self, model: Model | None) -> Thresholds:
        profile_window = model.context_window if model is not None else None
        return resolve_thresholds(
            profile_window=profile_window,
            context_window=self._context_window,
            observation=self._observation_threshold,
            reflection=self._reflection_threshold,
        )

    def get_observation_threshold(self, model: Model | None = None) -> int:
        """The observation threshold for ``model`` (default: the model of the latest request)."""
        return (self._thresholds(model) if model is not None else self._last_thresholds).observation

    def get_reflection_threshold(self, model: Model | None = None) -> int:
        """The reflection threshold for ``model`` (default: the model of the latest request)."""
        return (self._thresholds(model) if model is not None else self._last_thresholds).reflection

    @property
    def thresholds(self) -> Thresholds:
        """The thresholds the latest model request was measured against."""
        return self._last_thresholds

    async def switch_observer_model(self, model: Model | str, *, context_window_tokens: int | None = None) -> None:
        """Observe with another model from the next Observer job on (embedded: a pydantic-ai model or name;
        remote: a model id the server's endpoint serves)."""
        await self._switch("observer", model, context_window_tokens)

    async def switch_reflector_model(self, model: Model | str, *, context_window_tokens: int | None = None) -> None:
        """Reflect (and drop) with another model from the next Reflector job on; see
        :meth:`switch_observer_model`."""
        await self._switch("reflector", model, context_window_tokens)

    async def _switch(self, role: str, model: Model | str, context_window_tokens: int | None) -> None:
        if self.backend.remote:
            if not isinstance(model, str):
                raise ConfigurationError(f"an obsmem server switches the {role} by model id: pass a string")
            await asyncio.to_thread(self.backend.switch_model, role, model, context_window_tokens)
            if role == "reflector":
                await asyncio.to_thread(self.backend.switch_model, "dropper", model, context_window_tokens)
            return
        self._route(role, model)
        name = self._routed[role].model_id
        await self.hub.emit(
            OMEvent("om_model_changed", {"role": role, "model_id": name, "source": "pydantic_ai"}, self.session_id)
        )

    # -- pydantic-ai hooks ---------------------------------------------------------------------

    def get_toolset(self) -> AbstractToolset[Any] | None:
        if not self.tools_enabled:
            return None
        mode = self._search_mode or self.backend.search_mode()
        return memory_toolset(self.backend, mode)

    async def wrap_run(self, ctx: RunContext[Any], *, handler: Callable[[], Any]) -> Any:
        if self._groom is None:
            self._start_groom()
        self._start_poller()
        try:
            result = await handler()
            # The run's final answer follows its last model request: append it now, not with the next run.
            self._update_ledger(list(result.all_messages()))
            self._submit_append()
            return result
        finally:
            # What the run caused reaches the handler before the run returns; the poller goes on after it.
            with contextlib.suppress(Exception):
                await self._poll_events()
            await self._report_groom()

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        async with self._lock:
            return await self._prepare(ctx, request_context)

    async def _prepare(self, ctx: RunContext[Any], request_context: ModelRequestContext) -> ModelRequestContext:
        messages = list(ctx.messages)
        self._update_ledger(messages)
        self._submit_append()
        if self._verify:
            # A history not checked against the store yet (the first request, or another run's history)
            # waits for its append once: a history that differs is refused before the model is called.
            self._verify = False
            await self._appended()
        else:
            # A conflict a background append of this same history found: raised only now, after the ledger
            # saw this request's history (another history clears it and is checked afresh above).
            self._raise_append_error()
        thresholds = self._thresholds(request_context.model)
        self._last_thresholds = thresholds
        projection = await self._projection()
        compaction = compact(messages, self.ledger, projection)
        overhead = _request_overhead(request_context)
        budget = _budget(thresholds, request_context)
        if budget is not None and compaction.request_tokens + overhead > budget:
            compaction, projection = await self._last_resort(messages, compaction, projection, overhead, budget)
        self.last_compaction, self.last_projection = compaction, projection
        await self._keep_pipeline_moving(projection, thresholds)
        # Pipeline events arrive through the poller (every poll_seconds, between runs too), not here.
        await self._report(ctx, thresholds, projection, compaction, overhead)
        if compaction.replaced_messages == 0:
            return request_context
        return dataclasses.replace(request_context, messages=compaction.messages)

    async def _projection(self, deadline: float | None = None) -> ProjectionView:
        """The session's projection for a request. While obsmem cannot answer (a server away or restarting, a
        storage fault) the run goes on with the projection read last, which still covers exactly the events
        it says it does, or none: the appends meanwhile are retried with the next request, as ever. With a
        ``deadline`` (flush's), the read is given only the time left; none left counts as no answer."""
        try:
            projection = await self._read(self.backend.projection, **_bound(deadline))
        except ObsmemError as exc:
            if exc.status not in UNAVAILABLE_STATUSES:
                raise  # a mistake of the caller's (a wrong key, a refused project): not to be waited out
            self._log_once(exc.code, "memory unavailable (%s); going on with the memory read last")
            return self._projection_read or ProjectionView.empty()
        self._projection_read = projection
        return projection

    def _log_once(self, code: str, message: str) -> None:
        if code not in self._refusals:
            self._refusals.add(code)
            log.warning(message, code)

    async def _read(self, call: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """A read: over HTTP on a worker thread; embedded, at once on the loop. A local read takes a fraction
        of a millisecond, while a hop to a thread can wait several for the interpreter lock when the
        pipeline's workers are busy in the same process."""
        if self.backend.remote:
            return await asyncio.to_thread(call, *args, **kwargs)
        return call(*args, **kwargs)

    # -- observe: ordered background appends ---------------------------------------------------

    def _update_ledger(self, messages: list[ModelMessage]) -> None:
        resets = self.ledger.resets
        self.ledger.update(messages)
        if self.ledger.resets != resets:
            # Another history (a run that did not continue the last one): check it against the store again.
            # The previous history's conflict is not this one's, and how far it was appended says nothing
            # about this one: both are forgotten now, so the next submit appends (and checks) this history,
            # and again in order with the appends (the append thread runs one job at a time), in case an
            # append of the previous history is still running and sets them after this.
            self._append_error = None
            self._appended_through = self._stored_through = None
            self._appender.submit(self._recheck)
            self._verify = True

    def _recheck(self) -> None:
        self._appended_through = self._stored_through = None
        self._append_error = None

    def _submit_append(self) -> None:
        snapshot = list(self.ledger.events)
        appended = self._appended_through
        if not self._verify and appended is not None and appended >= len(snapshot):
            return  # nothing new, and the history was checked already
        self._append = self._appender.submit(self._append_events, snapshot)

    def _append_events(self, events: list[dict[str, Any]]) -> None:
        """A run's append (on the one append thread, so in order). One that fails is sent again with the next
        request, or by :meth:`close` or :meth:`flush` when no request follows."""
        failure = self._store(events)
        if failure is not None:
            log.warning("append to session failed (%s); sent again with the next request or at close()", failure)

    def _store(self, events: list[dict[str, Any]], deadline: float | None = None) -> str | None:
        """Append what the store lacks of ``events``, each call bounded by ``deadline`` where the backend can
        bound it. Returns the error code of a failure worth another attempt (the server away, the database
        busy); None when they are stored, refused as a conflict (then ``_append_error``), or refused as too large
        (413, a server's body limit below the smallest body the client cuts events to: no attempt would do)."""

        try:
            if self._appended_through is None:
                stored = self.backend.last_seq(**_bound(deadline))
                if stored > len(events):
                    raise SeqConflict(
                        f"session {self.session_id!r} already holds {stored} events, more than this run's "
                        f"messages make ({len(events)}): pass the earlier runs' messages as message_history "
                        "(result.all_messages()) or use a new session_id",
                        details={"stored_events": stored},
                    )
                # Send the last stored event again: a duplicate proves the history is the one stored. Not one
                # whose tool arguments this release cuts: a release before stored them whole, and the cut copy
                # would be a seq_conflict against a history that is the one stored.
                proof = stored if stored and arguments_cut(events[stored - 1]) else stored - 1
                self._appended_through = max(0, proof)
                self._stored_through = stored
            start = self._appended_through
            for offset in range(start, len(events), MAX_BATCH):
                batch = events[offset : offset + MAX_BATCH]
                self.backend.append(batch, **_bound(deadline))
                self._appended_through = self._stored_through = offset + len(batch)
            self._append_error = self._append_failure = None
        except SeqConflict as exc:
            if "stored_events" in exc.details:
                self._append_error = exc
                return None
            self._append_error = SeqConflict(
                f"session {self.session_id!r} holds different messages at the same positions: pass the earlier "
                "runs' messages as message_history (result.all_messages()) or use a new session_id",
                details=exc.details,
            )
        except ObsmemError as exc:
            self._append_failure = exc.code
            if exc.status == 413:  # too large even cut to the smallest body: sent again, it is refused again
                return None
            return exc.code  # transient (server away, disk busy)
        return None

    def _store_again(self, events: list[dict[str, Any]], deadline: float) -> None:
        """close()'s and flush()'s job on the append thread, so after every append submitted before it: send
        what the store still lacks of ``events`` again, a few times with pauses between, none past
        ``deadline``."""
        for pause in (0.0, *STORE_AGAIN_PAUSES_SECONDS):
            if (self._stored_through or 0) >= len(events) or isinstance(self._append_error, SeqConflict):
                return
            if time.monotonic() + pause >= deadline:
                return
            time.sleep(pause)
            if self._store(events, deadline) is None:
                return

    @property
    def unsent(self) -> int:
        """How many events of the latest run's history the store has not confirmed holding: 0 when every
        append succeeded; more while an append waits for its answer, or after appends that failed and
        nothing sent again yet (:meth:`close` and :meth:`flush` try again, and log what is left)."""
        return len(self.ledger.events) - (self._stored_through or 0)

    def _warn_unsent(self, answered: bool) -> None:
        """Say in the log, by count and never by content, that events of the session are not stored: once per
        batch (flush() and then close() finding the same events unsent logged them twice)."""
        unsent = self.unsent
        if not unsent:
            return
        batch = (self.ledger.resets, len(self.ledger.events), self._stored_through or 0)
        if batch == self._unsent_warned:
            return
        self._unsent_warned = batch
        noun, them = ("event", "it") if unsent == 1 else ("events", "them")
        if isinstance(self._append_error, SeqConflict):
            log.warning(
                "session %r: %d %s unsent (seq_conflict): the session holds messages this history does not match",
                self.session_id,
                unsent,
                noun,
            )
            return
        reason = self._append_failure if answered and self._append_failure else "no answer in time"
        log.warning(
            "session %r: %d %s unsent (%s); a later run that continues the session with its message_history "
            "sends %s again",
            self.session_id,
            unsent,
            noun,
            reason,
            them,
        )

    def _raise_append_error(self) -> None:
        if isinstance(self._append_error, SeqConflict):
            raise self._append_error

    async def _appended(self) -> None:
        if self._append is not None:
            await asyncio.wrap_future(self._append)
        self._raise_append_error()

    # -- groom at session start -----------------------------------------------------------------

    def _start_groom(self) -> None:
        """One groom pass on the groom thread; its event is emitted on this loop when it ends (or, if the loop
        has gone by then, by the next run's poll)."""
        loop = asyncio.get_running_loop()
        self._groom = self._groomer.submit(self._groom_pass)

        def ended(_: Future[dict[str, Any]]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: a later run reports it
                loop.call_soon_threadsafe(self._schedule_groom_report)

        self._groom.add_done_callback(ended)

    def _schedule_groom_report(self) -> None:
        self._groom_report_task = asyncio.ensure_future(self._report_groom())

    def _groom_pass(self) -> dict[str, Any]:
        """Runs on the groom thread. A project not created yet has no inbox: a cold start, not an error."""
        started = time.monotonic()
        try:
            return self.backend.groom()
        except NotFound as exc:
            if exc.code != "project_not_found":
                raise
            return {"promoted": [], "escalated": [], "escalated_count": 0, "cold_start": True}
        finally:
            self._groom_ms = round((time.monotonic() - started) * 1000)

    async def _report_groom(self) -> None:
        """Emit the groom pass's outcome once: ``om_groom`` with what it did, or ``om_groom_failed``."""
        future = self._groom
        if future is None or not future.done() or self._groom_reported:
            return
        self._groom_reported = True
        failure = future.exception()
        if failure is None:
            report = future.result()
            self.last_groom = report
            promoted, escalated = list(report.get("promoted", [])), list(report.get("escalated", []))
            data: dict[str, Any] = {
                "promoted": len(promoted),
                "escalated": int(report.get("escalated_count", len(escalated))),
                "promoted_ids": [str(item["id"]) for item in promoted],
                "cold_start": bool(report.get("cold_start", False)),
                "duration_ms": self._groom_ms,
            }
            await self.hub.emit(OMEvent("om_groom", data, self.session_id))
            return
        # An obsmem error's message names no memory text; anything else (a bug, or a database fault obsmem
        # has no code for) is ``internal_error`` with its type alone, as background jobs record it.
        code = failure.code if isinstance(failure, ObsmemError) else "internal_error"
        message = failure.message if isinstance(failure, ObsmemError) else type(failure).__name__
        log.warning("groom at session start failed: %s", code)
        data = {"error": code, "message": message, "duration_ms": self._groom_ms}
        await self.hub.emit(OMEvent("om_groom_failed", data, self.session_id))

    # -- the pipeline: observation and reflection requests ---------------------------------------

    def _unobserved_tokens(self, observed_through_seq: int) -> int:
        return self.ledger.tokens(self.ledger.messages_through(observed_through_seq))

    async def _keep_pipeline_moving(self, projection: ProjectionView, thresholds: Thresholds) -> None:
        through, asked_at = self._observe_requested
        unobserved = self._unobserved_tokens(projection.observed_through_seq)
        stale = time.monotonic() - asked_at > REOBSERVE_AFTER_SECONDS
        if unobserved >= thresholds.buffer and (projection.observed_through_seq >= through or stale):
            await self._request_observation()
        marker = (projection.generation, projection.observations)
        if projection.tokens > thresholds.reflection and marker != self._reflect_requested:
            self._reflect_requested = marker
            await self._call_quietly(self.backend.request_reflection)

    async def _request_observation(self) -> bool:
        """Ask for observation now; False when obsmem observes nothing (no model, or switched off)."""
        await self._appended()
        return await self._ask_to_observe()

    async def _ask_to_observe(self, deadline: float | None = None) -> bool:
        self._observe_requested = (self.ledger.last_seq, time.monotonic())
        return await self._call_quietly(self.backend.request_observation, **_bound(deadline))

    async def _call_quietly(self, call: Callable[..., None], **kwargs: float) -> bool:
        """Ask the pipeline for work; a server that does not observe (``observation_off``) is not an error
        for the agent's run: its messages are stored, and compaction uses whatever memory there is."""
        try:
            await asyncio.to_thread(call, **kwargs)
        except ObsmemError as exc:
            self._log_once(exc.code, "pipeline request refused: %s")
            return False
        return True

    async def _last_resort(
        self,
        messages: list[ModelMessage],
        compaction: Compaction,
        projection: ProjectionView,
        overhead: int,
        budget: int,
    ) -> tuple[Compaction, ProjectionView]:
        """The request does not fit: wait for observation up to the deadline, compact again, report."""
        started = time.monotonic()
        deadline = started + self.overflow_wait_seconds
        await self._request_observation()
        while compaction.request_tokens + overhead > budget and time.monotonic() < deadline:
            await asyncio.sleep(OVERFLOW_POLL_SECONDS)
            projection = await self._projection()
            compaction = compact(messages, self.ledger, projection)
            if projection.observed_through_seq >= self.ledger.last_seq:
                break
        if compaction.request_tokens + overhead > budget:
            await self.hub.emit(
                OMEvent(
                    "om_overflow",
                    {
                        "request_tokens": compaction.request_tokens + overhead,
                        "budget_tokens": budget,
                        "unobserved_tokens": self._unobserved_tokens(projection.observed_through_seq),
                        "memory_tokens": projection.tokens,
                        "waited_ms": round((time.monotonic() - started) * 1000),
                    },
                    self.session_id,
                )
            )
        return compaction, projection

    # -- events ---------------------------------------------------------------------------------

    def _start_poller(self) -> None:
        """Start the event poller on the running loop, once: it outlives the run, so an observation that ends
        between runs reaches the handler as it happens, and stops at :meth:`close` (or when its loop ends, as
        ``asyncio.run`` ends; the next run starts it again on its own loop)."""
        loop = asyncio.get_running_loop()
        if self._poller is not None and not self._poller.done() and self._poller.get_loop() is loop:
            return
        self._stop_poller()
        self._poller = loop.create_task(self._poll_forever(), name=POLLER_TASK_NAME)

    def _stop_poller(self) -> None:
        """Cancel the poller from any thread: through its loop when that loop runs in another thread, else
        directly (on its own loop, or on a loop that is not running: the cancellation lands when it runs)."""
        poller, self._poller = self._poller, None
        if poller is None or poller.done() or poller.get_loop().is_closed():
            return  # a closed loop runs nothing more: its poller is as good as stopped
        loop = poller.get_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not loop and loop.is_running():
            loop.call_soon_threadsafe(poller.cancel)
        else:
            poller.cancel()

    async def _poll_forever(self) -> None:
        """Poll every ``poll_seconds`` (one read when nothing happened) until cancelled."""
        while True:
            await self._report_groom()
            with contextlib.suppress(ObsmemError):
                await self._poll_events()
                if self._memory_moved:
                    # Render the new memory off the request path: the next request finds it rendered.
                    self._memory_moved = False
                    await asyncio.to_thread(self.backend.projection)
            await asyncio.sleep(self.poll_seconds)

    async def _poll_events(self, deadline: float | None = None) -> None:
        """Deliver the events logged since the last delivered one. The poller, a run's end and ``flush`` may
        poll at once: each event is delivered by whichever reaches it first (the cursor moves on the loop,
        before the handler is awaited), so none twice and in log order; a poll cancelled mid-read delivers
        nothing and moves nothing. With a ``deadline`` (flush's) each read is given only the time left."""
        await self._read(self._prime_cursor, deadline)
        while True:
            cursor = self._event_cursor or 0
            page = await self._read(self.backend.events_after, cursor, 200, **_bound(deadline))
            for body in page:
                log_id = int(body["id"])
                if log_id <= (self._event_cursor or 0):
                    continue  # another poll delivered it meanwhile
                self._event_cursor = log_id
                event = from_logged(body)
                if event.type in PIPELINE_EVENTS:
                    await self._deliver(event)
            if len(page) < 200:
                return

    def _prime_cursor(self, deadline: float | None = None) -> None:
        with self._cursor_lock:  # two first polls (the remote ones on threads) look the cursor up once
            if self._event_cursor is None:
                self._event_cursor = self._newest_event_id(deadline)

    def _newest_event_id(self, deadline: float | None = None) -> int:
        """Where the event cursor starts: after the session's existing events (a resumed session's history is
        not replayed)."""
        cursor = 0
        while page := self.backend.events_after(cursor, 1000, **_bound(deadline)):
            cursor = int(page[-1]["id"])
        return cursor

    async def _deliver(self, event: OMEvent) -> None:
        observations = None
        if event.type == "om_observation_start" and event.cycle_id:
            self._observing.add(event.cycle_id)
        elif event.type in ("om_observation_end", "om_observation_failed") and event.cycle_id:
            self._observing.discard(event.cycle_id)
        if event.type.endswith("_end"):
            self._memory_moved = True
        if event.type == "om_observation_end":
            self._cycles_since_activation += 1
            if self.include_observations:
                observations = await self._new_observations()
                # ``observations`` is obsmem's count here; the texts get a name of their own.
                event = dataclasses.replace(event, data=event.data | {"observation_texts": observations})
        await self.hub.emit(event)
        for companion in mastra_companions(event, observations):
            await self.hub.emit(companion)

    async def _new_observations(self) -> list[str]:
        """Observation lines in the memory that were not there at the previous call (opt-in payloads)."""
        projection = await self._read(self.backend.projection)
        lines = observation_lines(projection.text)
        known = self._known_observations or set()
        self._known_observations = known | set(lines)
        return [line for line in lines if line not in known]

    async def _report(
        self,
        ctx: RunContext[Any],
        thresholds: Thresholds,
        projection: ProjectionView,
        compaction: Compaction,
        overhead: int,
    ) -> None:
        observed = projection.observed_through_seq
        ledger, replaced = self.ledger, compaction.replaced_messages
        buffered_tokens = ledger.tokens(replaced, max(replaced, ledger.messages_through(observed)))
        if compaction.replaced_through_seq > self._activated_through:
            activated_from = min(ledger.messages_through(self._activated_through), replaced)
            activated_tokens = ledger.tokens(activated_from, replaced)
            await self.hub.emit(
                OMEvent(
                    "om_activation",
                    {
                        "operation_type": "observation",
                        "chunks_activated": self._cycles_since_activation,
                        "tokens_activated": activated_tokens,
                        "messages_replaced": compaction.replaced_messages,
                        "observed_through_seq": compaction.replaced_through_seq,
                        "generation": projection.generation,
                    },
                    self.session_id,
                )
            )
            self._activated_through = compaction.replaced_through_seq
            self._cycles_since_activation = 0
        pending = self._unobserved_tokens(observed)
        status = "observing" if self._observing else "idle"
        await self.hub.emit(
            OMEvent(
                "om_status",
                {
                    "status": status,
                    "record_id": self.project,
                    "thread_id": self.session_id,
                    "step_number": ctx.run_step,
                    "generation_count": projection.generation,
                    "windows": {
                        "active": {
                            "messages": len(compaction.messages),
                            "message_tokens": compaction.request_tokens - projection.tokens,
                            "observation_tokens": projection.tokens if compaction.replaced_messages else 0,
                        },
                        "buffered": {
                            "chunks": self._cycles_since_activation,
                            "message_tokens": buffered_tokens,
                            "observed_through_seq": observed,
                        },
                    },
                    "pending_tokens": pending,
                    "threshold": thresholds.observation,
                    "threshold_percent": round(100.0 * pending / thresholds.observation, 1),
                    "observation_tokens": projection.tokens,
                    "reflection_threshold": thresholds.reflection,
                    "context_window": thresholds.context_window,
                    "context_window_source": thresholds.source,
                    "request_tokens": compaction.request_tokens + overhead,
                },
                self.session_id,
            )
        )

    def events(self) -> AsyncIterator[OMEvent]:
        """Every event from now on, as an async iterator (``async for event in memory.events(): ...``)."""
        return self.hub.subscribe()

    # -- for the caller -------------------------------------------------------------------------

    async def status(self) -> dict[str, Any]:
        """The session's progress state (obsmem's session status, with Mastra's progress fields)."""
        return await asyncio.to_thread(self.backend.status)

    async def flush(self, timeout: float = 60.0) -> ProjectionView:
        """Append everything (sending again what failed appends left unsent, as :meth:`close` does), observe it
        all now, and wait until the memory covers every stored message, all within ``timeout`` seconds; e.g.
        when a session ends. Returns the projection it ended with; events still not stored are logged and
        counted in :attr:`unsent`.

        While obsmem cannot answer (502, 503, 504: the server away or restarting, a storage fault) it raises
        nothing, as a model request does: it returns the memory read last (empty before the first read), which
        still covers exactly the events it says. A mistake of the caller's (a wrong key) still raises."""
        deadline = time.monotonic() + timeout
        answered = True
        if not self._closed:
            job = self._appender.submit(self._store_again, list(self.ledger.events), deadline)
            try:
                # At the deadline the job is cancelled if it has not started; an attempt it runs goes on.
                await asyncio.wait_for(asyncio.wrap_future(job), _seconds_left(deadline) + STORE_GRACE_SECONDS)
            except TimeoutError:
                answered = False
        self._raise_append_error()
        self._warn_unsent(answered)
        # One deadline for every step: over HTTP each request is given only the time left (each was bounded by
        # the client's timeout alone, so a server that stopped answering held flush(5) for over a minute).
        observing = await self._ask_to_observe(deadline)
        stored_through = self.ledger.last_seq - self.unsent
        while True:
            projection = await self._projection(deadline)
            with contextlib.suppress(ObsmemError):  # obsmem away: the events wait for the poller's next read
                await self._poll_events(deadline)
            await self._report_groom()
            caught_up = projection.observed_through_seq >= stored_through
            if caught_up or not observing or time.monotonic() >= deadline:
                return projection
            await asyncio.sleep(OVERFLOW_POLL_SECONDS)

    def close(self, timeout: float = CLOSE_TIMEOUT_SECONDS) -> None:
        """Store what failed appends left unsent, then stop the event poller, the append thread and the pipeline
        models this capability routed (the memory stays open).

        No model request follows the last one to send a failed append again, so close does: it waits for the
        appends in flight and tries a few more times, spending ``timeout`` seconds at most. Embedded, an append
        waiting for a database another writer keeps locked stops waiting at that time (SQLite's busy timeout
        is 30 s), so no append of this capability outlives close. What is still not stored is logged as a
        warning naming the session and the count, and stays in :attr:`unsent`."""
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout <= 3600:
            raise ConfigurationError("timeout must be from 0 to 3600 seconds")
        self._stop_poller()
        if not self._closed:
            self._closed = True
            deadline = time.monotonic() + timeout
            if isinstance(self.backend, EmbeddedMemory):
                self.backend.stop_waiting_at(deadline)  # the append in flight too: none outlives close
            job = self._appender.submit(self._store_again, list(self.ledger.events), deadline)
            try:
                job.result(timeout=_seconds_left(deadline) + STORE_GRACE_SECONDS)
                answered = True
            except TimeoutError:
                answered = False
            except Exception as exc:  # noqa: BLE001 - a failure obsmem has no code for: named by its type
                self._append_failure, answered = type(exc).__name__, True
            self._warn_unsent(answered)
            self._appender.shutdown(wait=answered, cancel_futures=True)
        self._groomer.shutdown(wait=True)
        if isinstance(self.backend, EmbeddedMemory):
            for role, adapter in self._routed.items():
                # Only this capability's own route: another agent's capability on the same project keeps
                # its own, and with it its session's Observer.
                self.backend.memory.unroute_model(self.project, role, adapter)
                adapter.close()
        self._routed.clear()
        self.hub.close()


def observation_lines(text: str) -> list[str]:
    """The observation lines of a rendered projection (without their ``- `` bullet): the lines under the
    memory's ``Observations:`` heading, up to the next heading or the block's end. Reflections and the
    untrusted-notes section that follows the memory are bulleted alike, and are not observations."""
    lines: list[str] = []
    inside = False
    for line in text.splitlines():
        if line == "Observations:":
            inside = True
        elif not line or line.startswith("<") or line.endswith(":") and not line.startswith("- "):
            inside = False  # a blank line, a tag, or another heading ends the section
        elif inside and line.startswith("- ["):
            lines.append(line[2:])
    return lines


def _seconds_left(deadline: float) -> float:
    """Seconds until ``deadline`` (none left: 0)."""
    return max(0.0, deadline - time.monotonic())


def _bound(deadline: float | None) -> dict[str, float]:
    """A backend call's ``timeout`` keyword for ``deadline``: none without one, so calls without a deadline
    stay plain (as backends written before the protocol had timeouts take them)."""
    return {} if deadline is None else {"timeout": _seconds_left(deadline)}


def _request_overhead(request_context: ModelRequestContext) -> int:
    """Estimated tokens of what is sent besides the messages: instructions and tool definitions."""
    parameters = request_context.model_request_parameters
    total = 0
    for part in parameters.instruction_parts or ():
        total += estimate_tokens(part.content)
    for tool in (*parameters.function_tools, *parameters.output_tools):
        schema = json.dumps(tool.parameters_json_schema, ensure_ascii=False, separators=(",", ":"))
        total += estimate_tokens(tool.name) + estimate_tokens(tool.description or "") + estimate_tokens(schema)
    return total


def _budget(thresholds: Thresholds, request_context: ModelRequestContext) -> int | None:
    """The most a request may hold: the window less room for the answer (None: no window known)."""
    window = thresholds.context_window
    if window is None:
        return None
    settings = request_context.model_settings or {}
    answer = settings.get("max_tokens")
    reserve = answer if isinstance(answer, int) and answer > 0 else int(window * OUTPUT_RESERVE_FRACTION)
    return max(1, window - reserve)
