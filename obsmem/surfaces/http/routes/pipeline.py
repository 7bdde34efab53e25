"""The observation pipeline over HTTP: a session's memory (the instant projection and its details), its
progress state, requests to observe or reflect on it now, the project's pipeline event log as a list or a
server-sent-events stream, and switching the models of the pipeline's roles at run time.

Reads are ``async def`` and call the service on the event loop (indexed reads of a few milliseconds);
routes that write (``observe``, ``reflect``, ``PUT models``) run in the threadpool.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Request
from pydantic import BaseModel, BeforeValidator, Field
from sse_starlette.sse import EventSourceResponse
from starlette.responses import PlainTextResponse, Response

from obsmem.bounds import decimal_integer
from obsmem.errors import ValidationFailed
from obsmem.json_shape import strict_dumps
from obsmem.pipeline import ModelChanges
from obsmem.surfaces.http.deps import ProjectName, SessionPath, access_of, allowed_project, errors, service_of
from obsmem.surfaces.http.models import SESSION_PATTERN
from obsmem.surfaces.http.responses import JSONBody
from obsmem.surfaces.http.streams import FollowedStream, StreamFollowers
from obsmem.work import LOGGED_EVENTS, MAX_EVENT_ID

router = APIRouter(tags=["pipeline"])

STREAM_POLL_SECONDS = 0.25
STREAM_PUSH_RECHECK_SECONDS = 5.0
STREAM_PAGE = 200


class MemoryProjection(BaseModel):
    session_id: str
    empty: bool = Field(description="No reflections and no observations: fall back to your own summary.")
    reflections: int
    observations: int
    generation: int = Field(description="The active generation rendered (0 before the first promotion).")
    observed_through_seq: int = Field(
        description="Every event up to this seq is covered by `text` (read with it): replace exactly those."
    )
    tokens: int = Field(description="Estimated tokens of `text`.")
    text: str = Field(
        description="The rendered memory, then judged-relevant untrusted notes in a section of their own; "
        "empty when `empty` and no note is injected."
    )
    untrusted_notes: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Candidate notes a judge rated relevant (`id`, `tier`, `p`, `trusted: false`, `situation`, "
        "`content`); never trusted memory.",
    )


class CurrentActivity(BaseModel):
    stage: str = Field(description="`observer`, `reflector` or `dropper`.")
    tokens: int = Field(description="Estimated tokens the stage is working on.")
    running_seconds: float
    job_id: int


class LastError(BaseModel):
    type: str = Field(
        description="`om_observation_failed`, `om_reflection_failed`, `om_dropper_failed` or `job_failed`."
    )
    code: str
    message: str
    at: str


class SessionJobs(BaseModel):
    queued: int
    running: int


class Generation(BaseModel):
    number: int = Field(description="The generation count: 1 for the first promoted generation, then +1.")
    id: str = Field(description="12-character display form of `generation_id`.")
    generation_id: str = Field(description="Derived from the session and the active observations it started from.")
    promoted_at: str
    reflections_added: int
    observations_dropped: int
    observation_tokens_before: int
    observation_tokens_after: int | None


class Coverage(BaseModel):
    model_config = {"populate_by_name": True}

    not_covered: int = Field(alias="not covered", description="Active observations no reflection cites.")
    partly_covered: int = Field(alias="partly covered", description="Cited by one reflection.")
    strongly_covered: int = Field(alias="strongly covered", description="Cited by two or more reflections.")


class PoolPressure(BaseModel):
    observations: int = Field(description="Active observations.")
    observation_tokens: int = Field(description="Their estimated tokens.")
    observations_max_tokens: int = Field(description="`pools.observations_max_tokens`: the Dropper's target.")
    pool_percent: float = Field(description="`observation_tokens / observations_max_tokens x 100`.")
    reflection_threshold: int = Field(description="`reflector.reflect_after_observation_tokens`.")
    reflection_percent: float = Field(description="`observation_tokens / reflection_threshold x 100`.")
    reflections: int
    reflection_tokens: int
    dropped_observations: int = Field(description="Observations retired from the active memory (still searchable).")
    coverage: Coverage


class BufferedObservations(BaseModel):
    status: Literal["running", "pending", "idle"] = Field(description="The Observer now, events waiting, or none.")
    chunks: int = Field(description="Observer cycles completed (each one a chunk of events).")
    message_tokens: int = Field(description="Estimated tokens of the events observed.")
    projected_message_removal: int = Field(
        description="Events a compaction now replaces: every seq up to `observed_through_seq`."
    )
    observation_tokens: int = Field(description="Estimated tokens of the active observations replacing them.")


class BufferedReflection(BaseModel):
    status: Literal["running", "due", "idle"] = Field(description="The Reflector now, over its threshold, or none.")
    input_observation_tokens: int = Field(description="Active observation tokens before the newest reflection.")
    observation_tokens: int = Field(description="Active observation tokens after it.")


class BufferedProgress(BaseModel):
    observations: BufferedObservations
    reflection: BufferedReflection


class SessionStatus(BaseModel):
    session_id: str
    status: Literal["idle", "observing", "reflecting"]
    pending_tokens: int = Field(description="Estimated tokens of events not observed yet (the backlog).")
    threshold: int = Field(description="`observer.buffer_tokens`: the backlog that starts observation.")
    threshold_percent: float
    observation_threshold: int = Field(description="`observer.observation_threshold` (where agents compact).")
    observation_tokens: int = Field(description="Estimated tokens of the session's active observations.")
    reflection_threshold: int
    generation_count: int
    current_activity: CurrentActivity | None
    last_error: LastError | None = Field(description="The newest failure, until a later cycle succeeds.")
    pending_events: int
    observed_through_seq: int = Field(description="Every event up to this seq is observed (never decreases).")
    last_seq: int
    observer: Literal["enabled", "disabled", "not_configured"]
    reflector: Literal["enabled", "disabled", "not_configured"]
    generation: Generation | None = Field(description="The active generation; null before the first promotion.")
    pool: PoolPressure
    jobs: SessionJobs
    buffered: BufferedProgress = Field(
        description="Observation and reflection done in the background, waiting for the next compaction."
    )
    step_number: int = Field(description="Observer cycles completed for the session.")
    pre_reflection_tokens: int = Field(
        description="Active observation tokens before the newest reflection (the current ones before any)."
    )


class ReflectionDetail(BaseModel):
    id: str
    memory_id: str
    timestamp: str
    generation: int | None = Field(description="The generation that added it (null: written outside the pipeline).")
    content: str
    supporting_observation_ids: list[str] = Field(description="12-character ids of the observations it cites.")
    retired_support: int = Field(description="How many of them were dropped from the active memory since.")


class ObservationDetail(BaseModel):
    id: str
    memory_id: str
    timestamp: str
    importance: Literal["low", "medium", "high", "critical"]
    coverage: Literal["not covered", "partly covered", "strongly covered"]
    citations: int = Field(description="Reflections citing it.")
    source_seqs: list[int] = Field(description="The session events it was observed from.")
    content: str


class MemoryDetails(BaseModel):
    session_id: str
    generation_count: int
    generation: Generation | None
    pool: PoolPressure
    reflections: list[ReflectionDetail] = Field(description="Active reflections, in time order.")
    observations: list[ObservationDetail] = Field(description="Active observations, in time order.")


class RoleModelState(BaseModel):
    model_id: str | None = Field(description="The model the role's next job uses (null: none configured).")
    context_window_tokens: int
    source: Literal["settings", "override"]
    updated_at: str | None = Field(description="When the override was set (null for `settings`).")


class RoleModels(BaseModel):
    observer: RoleModelState
    reflector: RoleModelState
    dropper: RoleModelState


class ModelsResponse(BaseModel):
    models: RoleModels


class ModelsChanged(ModelsResponse):
    changed: list[Literal["observer", "reflector", "dropper"]] = Field(
        description="Roles whose model changed (each logged as an `om_model_changed` event)."
    )


class ObserveResponse(BaseModel):
    job_id: int
    queued: bool = Field(description="False when the same request was already waiting.")


class PipelineEvent(BaseModel):
    model_config = {"extra": "allow"}

    id: int
    type: str
    created_at: str
    session_id: str | None = None
    cycle_id: str | None = None
    job_id: int | None = None


class PipelineEventsResponse(BaseModel):
    events: list[PipelineEvent]
    last_id: int = Field(description="Pass as `after_id` to read on (equals `after_id` when nothing is new).")


SessionQuery = Annotated[
    str | None, Query(pattern=SESSION_PATTERN, max_length=128, description="Only events of this session.")
]


@router.get(
    "/projects/{project}/sessions/{session_id}/memory",
    response_model=MemoryProjection,
    responses={
        **errors(),
        200: {
            "description": "The projection; with `format=text`, the rendered text alone as `text/plain` (empty "
            "when there is no memory; the `X-Obsmem-Empty` header says which).",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
    },
    summary="The session's active memory, rendered for injection at compaction (instant, no model call)",
)
async def session_memory(
    request: Request,
    project: ProjectName,
    session_id: SessionPath,
    format: Annotated[  # noqa: A002 - the query parameter's name
        Literal["json", "text"], Query(description="`text` answers with the rendered text alone (text/plain).")
    ] = "json",
) -> Response:
    allowed_project(request, project)
    projection = service_of(request).memory(project, session_id, user=access_of(request).user)
    if format == "text":
        return PlainTextResponse(projection.text, headers={"X-Obsmem-Empty": str(projection.empty).lower()})
    return JSONBody(projection.to_dict())


@router.get(
    "/projects/{project}/sessions/{session_id}/status",
    response_model=SessionStatus,
    responses=errors(),
    summary="Progress state of the session's observation: backlog, threshold, current stage, last error",
)
async def session_status(request: Request, project: ProjectName, session_id: SessionPath) -> Response:
    allowed_project(request, project)
    return JSONBody(service_of(request).session_status(project, session_id).to_dict())


@router.post(
    "/projects/{project}/sessions/{session_id}/observe",
    response_model=ObserveResponse,
    status_code=202,
    responses=errors(
        (409, "This server observes nothing: no `[model]`, or `observer.enabled = false` (`observation_off`).")
    ),
    summary="Queue observation of everything in the session not observed yet (below the buffer too)",
)
def observe_session(request: Request, project: ProjectName, session_id: SessionPath) -> Response:
    allowed_project(request, project)
    result = service_of(request).observe(project, session_id)
    return JSONBody({"job_id": result.job_id, "queued": result.created}, status_code=202)


@router.get(
    "/projects/{project}/sessions/{session_id}/memory/details",
    response_model=MemoryDetails,
    responses=errors(),
    summary="The active memory for inspection: generation, pool pressure, support and coverage tiers",
)
async def session_memory_details(request: Request, project: ProjectName, session_id: SessionPath) -> Response:
    allowed_project(request, project)
    return JSONBody(service_of(request).memory_details(project, session_id).to_dict())


@router.post(
    "/projects/{project}/sessions/{session_id}/reflect",
    response_model=ObserveResponse,
    status_code=202,
    responses=errors(
        (409, "This server does not reflect: no `[model]`, or `reflector.enabled = false` (`reflection_off`).")
    ),
    summary="Queue a Reflector run over the session's active memory now (below the threshold too)",
)
def reflect_session(request: Request, project: ProjectName, session_id: SessionPath) -> Response:
    allowed_project(request, project)
    result = service_of(request).reflect(project, session_id)
    return JSONBody({"job_id": result.job_id, "queued": result.created}, status_code=202)


@router.get(
    "/projects/{project}/models",
    response_model=ModelsResponse,
    responses=errors(),
    summary="The model each pipeline role (observer, reflector, dropper) uses for its next job",
)
async def get_models(request: Request, project: ProjectName) -> Response:
    allowed_project(request, project)
    return JSONBody(service_of(request).models(project).to_dict())


@router.put(
    "/projects/{project}/models",
    response_model=ModelsChanged,
    responses=errors(),
    summary="Switch the model of pipeline roles at run time (used by each role's next job)",
)
def put_models(request: Request, project: ProjectName, body: ModelChanges) -> Response:
    allowed_project(request, project)
    return JSONBody(service_of(request).switch_models(project, body).to_dict())


@router.get(
    "/projects/{project}/events",
    response_model=PipelineEventsResponse,
    responses={
        **errors(),
        200: {
            "description": "A page of events; with `Accept: text/event-stream`, a server-sent-events stream "
            "(`id` = event id, `event` = type, `data` = the event as JSON), resumable with `Last-Event-ID`.",
            "content": {"text/event-stream": {}},
        },
    },
    summary="The pipeline event log: model stage cycles, model switches and failed jobs, as a list or a stream",
)
async def pipeline_events(
    request: Request,
    project: ProjectName,
    after_id: Annotated[
        int | None,
        BeforeValidator(decimal_integer),
        Query(ge=0, le=MAX_EVENT_ID, description="Only events with a larger id."),
    ] = None,
    limit: Annotated[
        int, BeforeValidator(decimal_integer), Query(ge=1, le=1000, description="Most events in a page.")
    ] = 100,
    session_id: SessionQuery = None,
    type: Annotated[  # noqa: A002 - the query parameter's name
        list[str] | None, Query(description="Only these event types (repeatable).")
    ] = None,
    accept: Annotated[str | None, Header(include_in_schema=False)] = None,
    last_event_id: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Response:
    allowed_project(request, project)
    types = tuple(type or ())
    if any(name not in LOGGED_EVENTS for name in types):
        raise ValidationFailed(f"type must be one of: {', '.join(LOGGED_EVENTS)}", field="type")
    service = service_of(request)
    start = after_id or 0
    if accept is not None and "text/event-stream" in accept:
        if last_event_id is not None:
            text = last_event_id.strip()
            if not (text.isascii() and text.isdigit() and len(text) <= 19) or int(text) > MAX_EVENT_ID:
                raise ValidationFailed("Last-Event-ID must be an event id", field="Last-Event-ID")
            start = max(start, int(text))
        service.pipeline_events(project, after=start, limit=1)  # unknown project: a 404 now, not mid-stream
        followers: StreamFollowers = request.app.state.stream_followers
        slot = followers.claim()
        if slot is None:
            return followers.refusal()
        stream = EventSourceResponse(_stream(request, project, start, session_id, types), ping=15)
        return FollowedStream(stream, slot, followers.idle_seconds)
    found = service.pipeline_events(project, after=start, limit=limit, session_id=session_id, types=types)
    return JSONBody({"events": [event.to_dict() for event in found], "last_id": found[-1].id if found else start})


async def _stream(
    request: Request, project: str, cursor: int, session_id: str | None, types: tuple[str, ...]
) -> AsyncIterator[dict[str, Any]]:
    service = service_of(request)
    push = service.event_push(project)  # None: poll the log
    while not await request.is_disconnected():
        token = push.token() if push is not None else 0  # before the read: an event after it wakes the wait
        found = service.pipeline_events(project, after=cursor, limit=STREAM_PAGE, session_id=session_id, types=types)
        for event in found:
            cursor = event.id
            yield {"id": str(event.id), "event": event.type, "data": strict_dumps(event.to_dict(), ensure_ascii=False)}
        if len(found) < STREAM_PAGE:
            if push is None:
                await asyncio.sleep(STREAM_POLL_SECONDS)
            else:
                # Woken by the push; the timeout only bounds what a lost notification can cost.
                await push.wait(token, STREAM_PUSH_RECHECK_SECONDS)
