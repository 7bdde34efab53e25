"""Projects: the ones a key may see, and one project's status."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from obsmem.surfaces.http.deps import ProjectName, access_of, allowed_project, errors, service_of
from obsmem.surfaces.http.models import ProjectsResponse, ProjectStatus
from obsmem.surfaces.http.responses import JSONBody

router = APIRouter(tags=["projects"])


@router.get("/projects", response_model=ProjectsResponse, responses=errors(), summary="Projects this key may use")
def list_projects(request: Request) -> Response:
    names = access_of(request).visible(service_of(request).project_names())
    return JSONBody({"projects": names})


@router.get(
    "/projects/{project}/status",
    response_model=ProjectStatus,
    responses=errors(),
    summary="Counts and activity of one project",
)
def project_status(request: Request, project: ProjectName) -> Response:
    allowed_project(request, project)
    return JSONBody(service_of(request).status(project).to_dict())
