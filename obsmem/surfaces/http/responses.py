"""JSON responses rendered with orjson when it is installed (several times faster for search hits)."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from obsmem.json_shape import strict_dumps

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency, but keep working without it
    orjson = None  # type: ignore[assignment]


def dumps(content: Any) -> bytes:
    """JSON bytes. Anything orjson refuses (a lone surrogate, an integer past 64 bits) falls back to the
    standard encoder with ASCII escapes, which can encode every Python string. A number that is not finite
    (only in tool arguments stored before they were refused) is written as ``null`` either way, as orjson
    does and as the tools and the CLI do (:func:`~obsmem.json_shape.strict_dumps`): strict JSON has no way to
    write it."""
    if orjson is not None:
        try:
            return orjson.dumps(content)
        except TypeError:
            pass
    return strict_dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


class JSONBody(JSONResponse):
    """A JSONResponse (so the OpenAPI schema shows the route's response model) rendered by :func:`dumps`."""

    def render(self, content: Any) -> bytes:
        return dumps(content)
