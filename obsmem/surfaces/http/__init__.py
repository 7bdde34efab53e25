"""The HTTP API: ``create_app(service)`` builds the FastAPI app, ``serve(settings)`` runs it."""

from obsmem.surfaces.http.app import create_app
from obsmem.surfaces.http.server import serve

__all__ = ["create_app", "serve"]
