"""Progress events at Mastra's parity: the pipeline's om_* events, and the ones the capability adds.

Delivered to the ``event_handler`` as they happen (sync or async callable) and to every async iterator
opened with :meth:`EventHub.subscribe`. From the pipeline's event log, each as it is logged:
``om_observation_start``/``_end``/``_failed``, ``om_reflection_*``, ``om_dropper_*``, ``om_model_changed``
and ``job_failed``. Every observation cycle runs in the background, which is what Mastra calls buffering,
so each one is also announced as ``om_buffering_start``/``om_buffering_end`` (or ``om_observation_failed``
alone). The capability adds ``om_status`` (every model request), ``om_activation`` (observed messages
replaced by memory for the first time), ``om_overflow`` (the last resort: a request that does not fit) and
``om_groom`` / ``om_groom_failed`` (the groom pass a session's first run starts).

Events carry counts, ids and durations; the observations themselves ride on ``om_observation_end`` (as
``observation_texts``: its ``observations`` is obsmem's count) and ``om_buffering_end`` (as ``observations``,
Mastra's name) only when the capability was built with ``include_observations=True``. Nothing here
logs event contents.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from obsmem.work import PIPELINE_EVENTS as PIPELINE_EVENTS  # re-exported beside the capability's own

log = logging.getLogger("obsmem.pydantic_ai.events")

CAPABILITY_EVENTS = (
    "om_status",
    "om_buffering_start",
    "om_buffering_end",
    "om_activation",
    "om_overflow",
    "om_groom",
    "om_groom_failed",
)
_ENVELOPE = ("id", "type", "created_at", "session_id", "cycle_id", "job_id")


@dataclass(frozen=True)
class OMEvent:
    """One progress event: its type, the cycle it belongs to, and its fields (``data``)."""

    type: str
    data: dict[str, Any] = field(default_factory=dict)
    session_id: str | None = None
    cycle_id: str | None = None
    log_id: int | None = None  # the pipeline event log's id; None for events the capability made
    created_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        envelope: dict[str, Any] = {"type": self.type, "session_id": self.session_id, "cycle_id": self.cycle_id}
        if self.log_id is not None:
            envelope["id"] = self.log_id
        if self.created_at is not None:
            envelope["created_at"] = self.created_at
        return envelope | self.data


def from_logged(body: dict[str, Any]) -> OMEvent:
    """An event of the pipeline's log (its JSON form, from either backend)."""
    return OMEvent(
        type=str(body["type"]),
        data={key: value for key, value in body.items() if key not in _ENVELOPE},
        session_id=body.get("session_id"),
        cycle_id=body.get("cycle_id"),
        log_id=int(body["id"]),
        created_at=body.get("created_at"),
    )


def mastra_companions(event: OMEvent, observations: list[str] | None = None) -> list[OMEvent]:
    """The Mastra-named events one logged event also stands for (buffering: background observation)."""
    if event.type == "om_observation_start":
        tokens = int(event.data.get("tokens_to_observe", 0))
        data: dict[str, Any] = {"operation_type": "observation", "tokens_to_buffer": tokens}
        return [OMEvent("om_buffering_start", data, event.session_id, event.cycle_id, None, event.created_at)]
    if event.type == "om_observation_end":
        data = {
            "operation_type": "observation",
            "tokens_buffered": int(event.data.get("tokens_observed", 0)),
            "buffered_tokens": int(event.data.get("observation_tokens", 0)),
            "duration_ms": event.data.get("duration_ms"),
        }
        if observations is not None:
            data["observations"] = observations
        return [OMEvent("om_buffering_end", data, event.session_id, event.cycle_id, None, event.created_at)]
    return []


Handler = Callable[[OMEvent], Any]


class EventHub:
    """Delivers events to the handler and to every open subscription, in order."""

    def __init__(self, handler: Handler | None) -> None:
        self.handler = handler
        self._queues: list[asyncio.Queue[OMEvent | None]] = []

    async def emit(self, event: OMEvent) -> None:
        if self.handler is not None:
            try:
                result = self.handler(event)
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:  # noqa: BLE001 - a failing handler must not break the agent's run
                log.warning("event handler failed on %s: %s", event.type, type(exc).__name__)
        for queue in self._queues:
            queue.put_nowait(event)

    async def subscribe(self) -> AsyncIterator[OMEvent]:
        """Every event from now on, until :meth:`close` (or the consumer stops iterating)."""
        queue: asyncio.Queue[OMEvent | None] = asyncio.Queue()
        self._queues.append(queue)
        try:
            while (event := await queue.get()) is not None:
                yield event
        finally:
            with contextlib.suppress(ValueError):
                self._queues.remove(queue)

    def close(self) -> None:
        for queue in self._queues:
            queue.put_nowait(None)
