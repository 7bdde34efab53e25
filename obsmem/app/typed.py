"""How the application floor's typed results are built from the stages' rows and turned back into JSON.

A result class is a frozen dataclass whose fields are declared in the order its JSON document lists them.
:func:`build` fills one from the mapping a stage returns and refuses a mapping whose keys differ from the
fields, so a stage that grows or loses a field fails loudly here instead of changing a surface's output
unseen. :meth:`JsonResult.to_dict` is the inverse, used by the surfaces at their edge.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

Result = TypeVar("Result", bound="JsonResult")

# Field metadata: the key is left out of the JSON document when the value is None (optional keys).
OMIT_IF_NONE = {"omit_if_none": True}


class JsonResult:
    """Mixin for result dataclasses: ``to_dict()`` gives the JSON document, keys in field order."""

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {}
        for item in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, item.name)
            if value is None and item.metadata.get("omit_if_none"):
                continue
            body[item.name] = plain(value)
        return body


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data: results become dicts, tuples become lists."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value


def build(cls: type[Result], data: Mapping[str, Any]) -> Result:
    """An instance of ``cls`` from ``data``; nested results, tuples and dicts of results are built too."""
    hints = _hints(cls)
    names = [item.name for item in dataclasses.fields(cls)]  # type: ignore[arg-type]
    required = {item.name for item in dataclasses.fields(cls) if not item.metadata.get("omit_if_none")}  # type: ignore[arg-type]
    unknown = set(data) - set(names)
    missing = required - set(data)
    if unknown or missing:
        raise TypeError(f"{cls.__name__}: unexpected keys {sorted(unknown)}, missing keys {sorted(missing)}")
    return cls(**{name: _convert(hints[name], data[name]) for name in names if name in data})


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The resolved field types of ``cls`` (the annotations are strings under postponed evaluation)."""
    found = _HINTS.get(cls)
    if found is None:
        found = _HINTS[cls] = typing.get_type_hints(cls)
    return found


def _convert(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return _convert(options[0], value) if len(options) == 1 else value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
        return build(hint, value)  # type: ignore[type-var]
    if origin is tuple:
        item = typing.get_args(hint)[0]
        return tuple(_convert(item, element) for element in value)
    if origin is dict:
        item = typing.get_args(hint)[1]
        return {key: _convert(item, element) for key, element in value.items()}
    return value
