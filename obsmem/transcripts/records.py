"""What a transcript reader hands the importer: events to store, and records it left out.

A reader turns an agent's records into :class:`Turn` (one obsmem event, with the session it belongs to
and where in the file it came from) and :class:`Skip` (a record that stores nothing). A skip is either
*deliberate* (thinking blocks, UI bookkeeping: counted by record type) or a *problem* (a malformed line,
an unknown record type, a missing parent: counted and reported with its file and line or row).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from obsmem.redaction import redacted_prefix, secret_kind

# Tool results and arguments longer than this are cut (the cut is stated in the stored text).
DEFAULT_MAX_TOOL_OUTPUT_CHARS = 20_000
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]{0,39}")


def text_or_none(value: object) -> str | None:
    """A field that should be text, or None: records are checked with ``in`` against sets of names, and a
    list or object where a name belongs must not raise."""
    return value if isinstance(value, str) else None


MAX_RECORD_ID_CHARS = 200


def record_id(value: object) -> str | None:
    """An agent's record id as the import keeps it (``import_records``), or None: text of at most
    :data:`MAX_RECORD_ID_CHARS` characters that is valid Unicode. A lone surrogate in a crafted or damaged
    id cannot be stored, and failed the import of its file (and of every file after it) with a traceback;
    such a record is imported as one without an id."""
    if not isinstance(value, str) or not value or len(value) > MAX_RECORD_ID_CHARS:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return value


def safe_name(value: object) -> str:
    """A record type, subtype or id as reports may show it: a short identifier, else ``?``. Reports never
    echo other text from a transcript (it could be memory text or a secret)."""
    return value if isinstance(value, str) and _NAME.fullmatch(value) and secret_kind(value) is None else "?"


@dataclass(frozen=True)
class ReaderOptions:
    """What the readers keep: tool outputs cut at ``max_tool_output_chars``, thinking only if asked."""

    max_tool_output_chars: int = DEFAULT_MAX_TOOL_OUTPUT_CHARS
    keep_thinking: bool = False


@dataclass
class Turn:
    """One event to store: ``event`` holds the fields of :class:`obsmem.events.EventIn` but ``seq``."""

    session_id: str
    event: dict[str, Any]
    line: int
    cwd: str | None = None
    key: str = ""  # a stable id within the session (document formats), to resume after it
    record_id: str | None = None  # the agent's id of the record it came from (Claude Code's uuid)


@dataclass(frozen=True)
class Skip:
    """A record that stores nothing: ``reason`` is its record type (or the problem's code)."""

    reason: str
    line: int
    problem: bool = False
    detail: str = ""


@dataclass
class SessionDoc:
    """A whole session as a document format reads it: its events in order, each with a stable key."""

    session_id: str
    cwd: str | None
    turns: list[Turn] = field(default_factory=list)
    project_hash: str | None = None  # Gemini CLI names a project by the SHA-256 of its root, not its path


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out (so the cut is never silent).

    What is kept is redacted with what follows the cut in view: a secret the cut splits is redacted whole,
    where its kept half (``ghp_Ab3dE``) would be stored as a fragment no detector knows."""
    if len(text) <= limit:
        return text
    kept = redacted_prefix(text, limit)
    return f"{kept}\n[cut: {len(text) - limit} of {len(text)} characters not stored]"


def iso_stamp(value: Any) -> Any:
    """An agent's timestamp as ISO 8601 text: ISO strings pass through, epoch milliseconds are converted.
    Anything else that is there (an object, a number out of range) is passed on as it is, so the event's
    validation reports it (``invalid_timestamp``) rather than the import time taking its place unsaid."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        seconds = value / 1000 if value > 10_000_000_000 else value
        try:
            return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        except (OverflowError, OSError, ValueError):
            return value
    return None if value == "" else value


def _stamped(event: dict[str, Any], stamp: object) -> dict[str, Any]:
    """``event`` with the record's timestamp, when it has one: whatever is there (not only text) is kept
    for validation to judge; an absent or empty one leaves the time of the import."""
    if stamp is not None and stamp != "":
        event["created_at"] = stamp
    return event


def message(role: str, content: str, stamp: object) -> dict[str, Any]:
    return _stamped({"role": role, "type": "message", "content": content}, stamp)


def tool_call(name: str | None, args: Any, call_id: str | None, stamp: object, limit: int) -> dict[str, Any]:
    """A tool call; string arguments longer than the cut size are cut like outputs."""
    if isinstance(args, str):
        args = cut(args, limit)
    event: dict[str, Any] = {
        "role": "assistant",
        "type": "tool_call",
        "content": "",
        "tool_name": name,
        "tool_args": args,
        "tool_call_id": call_id,
    }
    return _stamped(event, stamp)


def tool_result(
    name: str | None, output: str, call_id: str | None, stamp: object, limit: int, *, error: bool = False
) -> dict[str, Any]:
    """A tool result, cut at ``limit``; a failed call's output starts with ``[error]``."""
    text = cut(output, limit)
    event: dict[str, Any] = {
        "role": "tool",
        "type": "tool_result",
        "content": f"[error] {text}" if error else text,
        "tool_name": name,
        "tool_call_id": call_id,
    }
    return _stamped(event, stamp)


def parts_text(content: Any) -> str:
    """Text of content that is a string or a list of parts (``{"type": "text", "text"}``, ``{"text"}``)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
        return "\n".join(texts)
    return str(content)


class CallNames:
    """Tool names of recent calls by call id, so a result names its tool; bounded (oldest dropped first)."""

    LIMIT = 512

    def __init__(self, saved: dict[str, str] | None = None) -> None:
        self.names: dict[str, str] = dict(saved or {})

    def add(self, call_id: Any, name: Any) -> None:
        if isinstance(call_id, str) and isinstance(name, str):
            self.names[call_id] = name
            self.trim()

    def trim(self) -> None:
        """Drop the oldest names beyond :attr:`LIMIT` (also after code that fills :attr:`names` itself)."""
        while len(self.names) > self.LIMIT:
            del self.names[next(iter(self.names))]

    def get(self, call_id: Any) -> str | None:
        return self.names.get(call_id) if isinstance(call_id, str) else None

    def state(self, session: str | None) -> dict[str, Any]:
        """What a reader that names its tools this way saves at a watermark: the names, and its session once known."""
        saved: dict[str, Any] = {"calls": self.names}
        if session:
            saved["session"] = session
        return saved
