"""JSON responses rendered with orjson when it is installed (several times faster for search hits)."""

from __future__ import annotations

import json
import math
from typing import Any

from starlette.responses import JSONResponse

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency, but keep working without it
    orjson = None  # type: ignore[assignment]


def dumps(content: Any) -> bytes:
    """JSON bytes. Anything orjson refuses (a lone surrogate, an integer past 64 bits) falls back to the
    standard encoder with ASCII escapes, which can encode every Python string. A number that is not finite
    (only in tool arguments stored before they were refused) is written as ``null`` either way, as orjson
    does: strict JSON has no way to write it."""
    if orjson is not None:
        try:
            return orjson.dumps(content)
        except TypeError:
            pass
    return json.dumps(_finite(content), ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode("ascii")


def _finite(value: Any) -> Any:
    """``value`` with every float that is not finite replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


class JSONBody(JSONResponse):
    """A JSONResponse (so the OpenAPI schema shows the route's response model) rendered by :func:`dumps`."""

    def render(self, content: Any) -> bytes:
        return dumps(content)
