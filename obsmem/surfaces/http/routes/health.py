"""``GET /v1/health``: liveness, no key needed."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from obsmem.surfaces.http.models import HealthResponse
from obsmem.surfaces.http.responses import JSONBody
from obsmem.version import __version__

router = APIRouter(tags=["health"])
_BODY = {"status": "ok", "version": __version__}


@router.get("/health", response_model=HealthResponse, summary="Liveness (no API key needed)")
async def health() -> Response:
    return JSONBody(_BODY)
