"""Reads of memory: ``memory_search`` and ``recall``.

Both are ``async def``. Whether a search runs on the event loop or in the threadpool is decided by
retrieval's mode dispatch (``SearchModes.runs_inline``: an exact search of the memories inline, an indexed
read cheaper than a hop through the threadpool, see docs/benchmarks.md, "HTTP"; one of the conversation,
whose cost grows with the events not indexed yet, and a hybrid one in the threadpool, so they never hold up
the requests of other clients). A recall always runs in the threadpool: an id that matches no memory is
compared with every event not indexed yet (each one's id computed, about 0.3 s for 100,000 events), and a
recalled event comes with its neighbours, which can each hold a tool's whole output.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from obsmem.surfaces.http.deps import MemoryIdPath, ProjectName, access_of, allowed_project, errors, service_of
from obsmem.surfaces.http.models import (
    SESSION_PATTERN,
    EventRecallResponse,
    ForgetResponse,
    RecallResponse,
    SearchRequest,
    SearchResponse,
)
from obsmem.surfaces.http.notes_models import NoteRecallResponse
from obsmem.surfaces.http.responses import JSONBody

router = APIRouter(tags=["memory"])


@router.post(
    "/projects/{project}/search",
    response_model=SearchResponse,
    responses=errors(
        (
            409,
            "Hybrid search of a project whose semantic index was built with other [semantic] settings than the "
            "server's (`semantic_settings_mismatch`): `obsmem index PROJECT` with the new settings switches it.",
        ),
        (
            503,
            "Hybrid search cannot answer now (`index_building`, `embedding_unavailable`, ...), or the server is "
            "over its caps (`over_capacity`).",
        ),
    ),
    summary="memory_search: exact substring or hybrid search over memories, the conversation or both",
)
async def search(request: Request, project: ProjectName, body: SearchRequest) -> Response:
    allowed_project(request, project)
    service = service_of(request)
    arguments = body.model_dump(exclude={"query"})
    arguments["user"] = access_of(request).user
    if service.search_modes.runs_inline(body.mode, body.scope):
        result = service.search(project, body.query, **arguments)
    else:
        result = await run_in_threadpool(lambda: service.search(project, body.query, **arguments))
    return JSONBody(result.to_dict())


@router.get(
    "/projects/{project}/memories/{id}",
    response_model=RecallResponse | EventRecallResponse | NoteRecallResponse,
    responses=errors(),
    summary="recall: a memory and its provenance, a conversation event with the events around it, or a note",
)
async def recall(
    request: Request,
    project: ProjectName,
    id: MemoryIdPath,
    session_id: Annotated[
        str | None,
        Query(
            pattern=SESSION_PATTERN,
            max_length=128,
            description="Look only in this session (pass the session_id of the search hit).",
        ),
    ] = None,
) -> Response:
    allowed_project(request, project)
    service, user = service_of(request), access_of(request).user

    def recalled() -> Response:  # rendered in the thread too: the events can be large
        return JSONBody(service.recall(project, id, session_id=session_id, user=user).to_dict())

    return await run_in_threadpool(recalled)


@router.delete(
    "/projects/{project}/memories/{id}",
    response_model=ForgetResponse,
    responses=errors(),
    summary="Delete a memory: gone from every search result at once",
)
def forget(
    request: Request,
    project: ProjectName,
    id: MemoryIdPath,
    session_id: Annotated[
        str | None,
        Query(pattern=SESSION_PATTERN, max_length=128, description="Look only in this session."),
    ] = None,
) -> Response:
    allowed_project(request, project)
    return JSONBody(service_of(request).forget(project, id, session_id=session_id).to_dict())
