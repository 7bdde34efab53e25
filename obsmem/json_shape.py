"""What a client's free-form JSON (an event's ``tool_args``) may hold beyond being JSON.

Two things JSON parsers accept and the rest of the product cannot keep: nesting deeper than the code
that walks a value (redaction, rendering) can follow without running out of stack, and numbers that are
not finite (``NaN``, ``Infinity``, ``1e400``), which strict JSON has no way to write, so a response
holding one is not JSON to most clients. Both are refused where the value comes in; a number stored
before that (only tool arguments hold one) is written as ``null`` by every JSON output (:func:`finite`).
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_JSON_DEPTH = 64  # far beyond any tool's arguments; redaction walks a level in two frames


def json_shape_problem(value: Any) -> str | None:
    """Why ``value`` cannot be stored (too deep, or a number that is not finite), or None. Walks the value
    without recursion, so a value of any depth is checked."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return "holds a number that is not finite (NaN or Infinity)"
        # A tuple is written as a JSON array: a Python caller's tuples are checked as lists are.
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list | tuple) else None
        if children is None:
            continue
        if depth > MAX_JSON_DEPTH:
            return f"is nested more than {MAX_JSON_DEPTH} levels deep"
        pending.extend((child, depth + 1) for child in children)
    return None


def finite(value: Any) -> Any:
    """``value`` with every float that is not finite replaced by None (tuples become lists), as orjson
    writes it: what strict JSON can hold. Only tool arguments stored before such numbers were refused hold
    one, and every JSON output (HTTP, the agent tools, the CLI) writes them as ``null``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


def strict_dumps(value: Any, **options: Any) -> str:
    """``json.dumps(value, **options)`` that writes strict JSON: a number that is not finite as ``null``
    (:func:`finite`), never as ``NaN`` or ``Infinity``. Such a number is rare (only in tool arguments stored
    before they were refused), so the value is copied by :func:`finite` only when the encoder meets one."""
    try:
        return json.dumps(value, allow_nan=False, **options)
    except ValueError:
        return json.dumps(finite(value), allow_nan=False, **options)
