"""Rows restored from an export pass through redaction, as every other write does.

An export of obsmem holds text obsmem already redacted, which redaction leaves as it is. But a file restored
may have been edited, or written before a detector existed: docs/redaction.md promises that nothing is
stored without redaction, and a restore is a write. The text columns of events, memories and notes, and
a judgment's query, are redacted on the way in; an event whose text changed gets the fingerprint of its new
text (what a repeated append compares), and its arguments must be JSON, as every append's are (a recall
parses them).
"""

from __future__ import annotations

import json
from typing import Any

from obsmem.errors import ExportInvalid
from obsmem.events import event_fingerprint
from obsmem.ids import canonical_json
from obsmem.redaction import redact_json, redact_text

# Per record kind, the text columns a person or an agent wrote.
_TEXT_COLUMNS: dict[str, tuple[str, ...]] = {
    "event": ("content", "tool_name", "tool_call_id"),
    "observation": ("content",),
    "reflection": ("content",),
    "note": ("content", "situation"),
    "judgment": ("query",),  # the search query judging stores, redacted as judging redacts it
}


def redacted_row(kind: str, row: dict[str, Any], line: int) -> dict[str, Any]:
    """``row`` with its text redacted (the same row when nothing changed)."""
    columns = _TEXT_COLUMNS.get(kind)
    if columns is None:
        return row
    changed = {name: redact_text(row[name]) for name in columns if isinstance(row.get(name), str) and row[name]}
    if kind == "event" and row.get("tool_args") is not None:
        changed["tool_args"] = _redacted_arguments(row["tool_args"], line)
    changed = {name: value for name, value in changed.items() if value != row[name]}
    if not changed:
        return row
    updated = {**row, **changed}
    if kind == "event" and "fingerprint" in updated:
        updated["fingerprint"] = event_fingerprint(
            updated["role"],
            updated["type"],
            updated["content"],
            updated.get("tool_name"),
            updated.get("tool_args"),
            updated.get("tool_call_id"),
        )
    return updated


def _redacted_arguments(stored: Any, line: int) -> str:
    if not isinstance(stored, str):
        raise ExportInvalid(f"line {line}: an event's tool_args is not JSON text")
    try:
        arguments = json.loads(stored)
    except (ValueError, RecursionError):
        raise ExportInvalid(f"line {line}: an event's tool_args is not JSON") from None
    return canonical_json(redact_json(arguments)).decode("utf-8")
