"""The ``memory`` tool's writes over HTTP: an obsmem server's notes routes behind :class:`NoteWriter`.

The tool's runner (:func:`obsmem.surfaces.tool_memory.run_memory_tool`) is the same in both modes; only where
its writes go differs. Each argument is checked here first with the trust floor's own parsers, in the order
:class:`~obsmem.Obsmem` checks them, so a model's mistake reads the same as in process and over MCP (the
routes' request schemas would word it otherwise), and a note id reaches a URL only once it is plain hex.
The server checks everything again and decides the user tier from the API key, so ``user`` is not sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from obsmem.trust import parse_content, parse_note_id, parse_situation, parse_tier

if TYPE_CHECKING:  # backends.py builds this class: a runtime import would be circular
    from obsmem.pydantic_ai.backends import ObsmemClient


@dataclass(frozen=True)
class RemoteWrite:
    """A save's or an update's answer, as the server sent it."""

    body: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.body)


@dataclass(frozen=True)
class RemoteForgotten:
    """A forget's answer: the note's display id, full id and status."""

    id: str
    note_id: str
    status: str


class RemoteNotes:
    """Save, update and forget notes of ``obsmem serve`` (``POST``/``PUT``/``DELETE /v1/projects/{p}/notes``)."""

    def __init__(self, client: ObsmemClient) -> None:
        self.client = client

    def save_note(
        self,
        project: str,
        content: object,
        *,
        situation: object = None,
        tier: object = None,
        user: str | None = None,
    ) -> RemoteWrite:
        body: dict[str, Any] = {"action": "save", "content": parse_content(content)}
        if situation is not None:
            body["situation"] = parse_situation(situation)
        body["tier"] = parse_tier(tier)
        return RemoteWrite(dict(self.client.call("POST", f"/projects/{project}/notes", json=body)))

    def update_note(
        self, project: str, note_id: object, content: object, *, situation: object = None, user: str | None = None
    ) -> RemoteWrite:
        body: dict[str, Any] = {"content": parse_content(content)}
        if situation is not None:
            body["situation"] = parse_situation(situation)
        path = f"/projects/{project}/notes/{parse_note_id(note_id)}"
        return RemoteWrite(dict(self.client.call("PUT", path, json=body)))

    def forget_note(self, project: str, note_id: object, *, user: str | None = None) -> RemoteForgotten:
        answer = self.client.call("DELETE", f"/projects/{project}/notes/{parse_note_id(note_id)}")
        return RemoteForgotten(str(answer["id"]), str(answer["memory_id"]), str(answer["status"]))
