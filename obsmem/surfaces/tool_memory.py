"""The ``memory`` agent tool: save, update or forget a note. One definition, included by every toolset.

An agent writes what it wants remembered; obsmem stores it as an untrusted candidate (``trusted: false``
on every write) that earns trust through judgments (docs/trust.md). :func:`memory_tool_definition` is the
function definition (OpenAI function-calling shape) and :func:`run_memory_tool` runs one call's arguments
against a :class:`NoteWriter` (an :class:`~obsmem.Obsmem`, or anything that writes notes the same way,
such as the pydantic-ai capability's client of an obsmem server); :mod:`obsmem.surfaces.tools` (and with it
MCP) includes both, and any other toolset should too, so the tool reads the same everywhere.
"""

from __future__ import annotations

from typing import Any, Protocol

from obsmem.errors import InvalidArguments

MEMORY = "memory"
MEMORY_ARGUMENTS: tuple[str, ...] = ("action", "content", "situation", "tier", "id")
ACTIONS: tuple[str, ...] = ("save", "update", "forget")

_DESCRIPTION = (
    "Write to this project's memory yourself. action 'save' stores a note: one line of content (a fact, "
    "a decision, a convention, a correction) and, optionally, the situation it applies to. action 'update' "
    "stores a corrected version of the note with this id; action 'forget' removes the note with this id "
    "from memory at once. Every write is stored as an untrusted candidate (trusted: false): a note becomes "
    "trusted only after it has been judged relevant and confirmed, so saving never makes something true. "
    "Saving a note identical to one already stored answers duplicate: true; its status is 'unchanged' when "
    "that note is already trusted (note_status says its standing). "
    "tier 'project' (default) keeps the note for this project; tier 'user' keeps it for every project of "
    "this user (preferences, habits). Save what you would want to know next time; do not save what the "
    "conversation already records, secrets, or guesses."
)


class WrittenNote(Protocol):
    """What a save or an update answers (:class:`~obsmem.trust.NoteWrite` in this process)."""

    def to_dict(self) -> dict[str, Any]: ...


class ForgottenNote(Protocol):
    """What a forget answers (the forgotten :class:`~obsmem.trust.Note` in this process)."""

    @property
    def id(self) -> str: ...

    @property
    def note_id(self) -> str: ...

    @property
    def status(self) -> str: ...


class NoteWriter(Protocol):
    """Where the tool's writes go: :class:`~obsmem.Obsmem`'s note methods, with the same arguments and errors."""

    def save_note(
        self, project: str, content: object, *, situation: object = ..., tier: object = ..., user: str | None = ...
    ) -> WrittenNote: ...

    def update_note(
        self, project: str, note_id: object, content: object, *, situation: object = ..., user: str | None = ...
    ) -> WrittenNote: ...

    def forget_note(self, project: str, note_id: object, *, user: str | None = ...) -> ForgottenNote: ...


def memory_tool_definition() -> dict[str, Any]:
    """The ``memory`` tool in the OpenAI function-calling shape."""
    parameters = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": list(ACTIONS), "description": "save, update or forget."},
            "content": {
                "type": "string",
                "description": "save and update: the note, one line (at most 4000 characters).",
            },
            "situation": {
                "type": "string",
                "description": "save and update: when the note applies, e.g. 'when releasing' (optional).",
            },
            "tier": {
                "type": "string",
                "enum": ["project", "user"],
                "description": "save: 'project' (default) or 'user' (follows this user across projects).",
            },
            "id": {"type": "string", "description": "update and forget: the note's id (12-64 hex characters)."},
        },
        "required": ["action"],
        "additionalProperties": False,
    }
    return {"type": "function", "function": {"name": MEMORY, "description": _DESCRIPTION, "parameters": parameters}}


def run_memory_tool(service: NoteWriter, project: str, args: dict[str, Any], *, user: str | None) -> dict[str, Any]:
    """Run one call's (already parsed) arguments; raises :class:`~obsmem.errors.ObsmemError` on a mistake."""
    action = args.get("action")
    if action not in ACTIONS:
        raise InvalidArguments("action must be 'save', 'update' or 'forget'", field="action")
    if action == "save":
        if "id" in args:
            raise InvalidArguments("save does not take id; use update to change a note", field="id")
        note = service.save_note(
            project, args.get("content"), situation=args.get("situation"), tier=args.get("tier"), user=user
        )
        return note.to_dict()
    if "id" not in args:
        raise InvalidArguments(f"{action} needs the note's id", field="id")
    if "tier" in args:
        raise InvalidArguments(f"{action} does not take tier: the note keeps its own", field="tier")
    if action == "update":
        written = service.update_note(
            project, args["id"], args.get("content"), situation=args.get("situation"), user=user
        )
        return written.to_dict()
    for extra in ("content", "situation"):
        if extra in args:
            raise InvalidArguments(f"forget does not take {extra}", field=extra)
    forgotten = service.forget_note(project, args["id"], user=user)
    return {"id": forgotten.id, "memory_id": forgotten.note_id, "status": forgotten.status, "trusted": False}
