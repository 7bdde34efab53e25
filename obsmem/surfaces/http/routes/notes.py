"""Notes, judgments and groom: agent-written memory that earns trust (docs/trust.md).

Writes are plain ``def`` (they may wait on the write lock, so FastAPI runs them in the threadpool); the
lists are ``async def`` reads. The caller's user tier is its API key's owner, or the local account without
keys (:attr:`Access.user`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request
from pydantic import BeforeValidator
from starlette.responses import Response

from obsmem.bounds import decimal_integer
from obsmem.surfaces.http.deps import ProjectName, access_of, allowed_project, errors, service_of
from obsmem.surfaces.http.notes_models import (
    JUDGMENT_ID_PATTERN,
    NOTE_ID_PATTERN,
    GroomResponse,
    JudgmentOut,
    JudgmentsResponse,
    NoteForgottenResponse,
    NoteSave,
    NotesResponse,
    NoteUpdate,
    NoteWritten,
    Resolution,
)
from obsmem.surfaces.http.responses import JSONBody

router = APIRouter(tags=["notes"])

NoteIdPath = Annotated[str, Path(pattern=NOTE_ID_PATTERN, description="A note id or a unique 12-64 hex prefix.")]
JudgmentIdPath = Annotated[str, Path(pattern=JUDGMENT_ID_PATTERN, description="A judgment id (`j` + 16 hex).")]


@router.post(
    "/projects/{project}/notes",
    response_model=NoteWritten,
    responses=errors(),
    summary="Save a note: stored as an untrusted candidate",
)
def save_note(request: Request, project: ProjectName, body: NoteSave) -> Response:
    allowed_project(request, project)
    written = service_of(request).save_note(
        project, body.content, situation=body.situation, tier=body.tier, user=access_of(request).user
    )
    return JSONBody(written.to_dict())


@router.put(
    "/projects/{project}/notes/{id}",
    response_model=NoteWritten,
    responses=errors((409, "The note was forgotten (`note_forgotten`) or superseded (`note_superseded`).")),
    summary="Update a note: a new candidate that supersedes it once promoted",
)
def update_note(request: Request, project: ProjectName, id: NoteIdPath, body: NoteUpdate) -> Response:
    allowed_project(request, project)
    written = service_of(request).update_note(
        project, id, body.content, situation=body.situation, user=access_of(request).user
    )
    return JSONBody(written.to_dict())


@router.delete(
    "/projects/{project}/notes/{id}",
    response_model=NoteForgottenResponse,
    responses=errors(),
    summary="Forget a note: gone from every search at once",
)
def forget_note(request: Request, project: ProjectName, id: NoteIdPath) -> Response:
    allowed_project(request, project)
    note = service_of(request).forget_note(project, id, user=access_of(request).user)
    return JSONBody({"id": note.id, "memory_id": note.note_id, "status": note.status, "trusted": False})


@router.get(
    "/projects/{project}/notes",
    response_model=NotesResponse,
    responses=errors(),
    summary="Notes of the project and the caller's user tier, newest first",
)
async def list_notes(
    request: Request,
    project: ProjectName,
    status: Annotated[Literal["candidate", "trusted", "superseded", "forgotten"] | None, Query()] = None,
    limit: Annotated[
        int, BeforeValidator(decimal_integer), Query(ge=1, le=500, description="Most notes to list, newest first.")
    ] = 500,
) -> Response:
    allowed_project(request, project)
    found = service_of(request).notes(project, status=status, limit=limit, user=access_of(request).user)
    return JSONBody(found.to_dict())


@router.get(
    "/projects/{project}/judgments",
    response_model=JudgmentsResponse,
    responses=errors(),
    summary="Judgments of candidate notes (escalated: waiting for a person)",
)
async def list_judgments(
    request: Request,
    project: ProjectName,
    state: Annotated[Literal["open", "escalated", "resolved"] | None, Query()] = None,
    limit: Annotated[
        int,
        BeforeValidator(decimal_integer),
        Query(ge=1, le=500, description="Most judgments to list, newest first."),
    ] = 500,
) -> Response:
    allowed_project(request, project)
    found = service_of(request).judgments(project, state=state, limit=limit, user=access_of(request).user)
    return JSONBody(found.to_dict())


@router.post(
    "/projects/{project}/judgments/{judgment_id}/resolve",
    response_model=JudgmentOut,
    responses=errors((409, "The judgment was resolved with the other outcome (`judgment_resolved`).")),
    summary="Resolve a judgment: was the note relevant?",
)
def resolve_judgment(request: Request, project: ProjectName, judgment_id: JudgmentIdPath, body: Resolution) -> Response:
    allowed_project(request, project)
    found = service_of(request).resolve_judgment(project, judgment_id, body.outcome, user=access_of(request).user)
    return JSONBody(found.to_dict())


@router.post(
    "/projects/{project}/groom",
    response_model=GroomResponse,
    responses=errors(),
    summary="Groom: promote candidates whose judgments resolved true (at most 50 per pass)",
)
def groom(request: Request, project: ProjectName) -> Response:
    allowed_project(request, project)
    return JSONBody(service_of(request).groom(project, user=access_of(request).user).to_dict())
