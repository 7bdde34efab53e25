"""Writes: append conversation events, write observations (for external observers).

Both are plain ``def`` routes: a write waits for the project's write lock (``BEGIN IMMEDIATE``), which
must never block the event loop. A write to a project that does not exist yet creates it (if the key
may use that project name); reads never create one.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from obsmem.surfaces.http.deps import ProjectName, SessionPath, allowed_project, errors, service_of
from obsmem.surfaces.http.models import (
    AppendResponse,
    EventsRequest,
    ObservationsRequest,
    WriteReceiptResponse,
)
from obsmem.surfaces.http.responses import JSONBody

router = APIRouter(tags=["ingest"])


@router.post(
    "/projects/{project}/sessions/{session_id}/events",
    response_model=AppendResponse,
    responses=errors((409, "A different event already holds one of the seqs (`seq_conflict`); nothing stored.")),
    summary="Append conversation events (idempotent per seq)",
)
def append_events(request: Request, project: ProjectName, session_id: SessionPath, body: EventsRequest) -> Response:
    allowed_project(request, project)
    receipt = service_of(request).append_events(project, session_id, body.events)
    return JSONBody(receipt.to_dict())


@router.post(
    "/projects/{project}/observations",
    response_model=WriteReceiptResponse,
    responses=errors(),
    summary="Write observations, with a receipt per item",
)
def write_observations(request: Request, project: ProjectName, body: ObservationsRequest) -> Response:
    allowed_project(request, project)
    receipt = service_of(request).add_observations(project, body.observations)
    return JSONBody(receipt.to_dict())
