"""The two generic JSONL formats obsmem read before the agent importers: obsmem events and OpenAI chat.

- ``obsmem``: one event per line, ``{"role", "type", "content", "tool_name"?, "tool_args"?, "seq"?,
  "created_at"?, "session_id"?}``, as ``obsmem ingest`` reads it. A line's ``seq`` is kept.
- ``openai-chat``: one chat message per line, ``{"role", "content", "tool_calls"?, "tool_call_id"?,
  "name"?, "session_id"?}`` (see :func:`obsmem.importing.openai_message_to_events`).

Neither records a working directory, so the project is given with ``--project``. A line without a
``session_id`` belongs to the session named after the file (its stem, when that is a valid session id).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, ClassVar

from obsmem.importing import openai_message_to_events
from obsmem.transcripts.formats import LineFormat, decode_json_line
from obsmem.transcripts.records import CallNames, Skip, Turn, cut

_SESSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")


class _ChatLines(LineFormat):
    take_whole_last_object: ClassVar[bool] = True  # as `obsmem ingest` reads them: to the end

    def restore(self, state: dict[str, Any]) -> None:
        self.calls = CallNames(state.get("calls"))
        stem = self.path.name.split(".")[0]
        self.default_session = stem if _SESSION.fullmatch(stem) else "imported"

    def state(self) -> dict[str, Any]:
        return {"calls": self.calls.names}

    def _session(self, record: dict[str, Any]) -> str:
        session = record.pop("session_id", None)
        return session if isinstance(session, str) and session else self.default_session

    def _cut(self, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("type") == "tool_result" and isinstance(event.get("content"), str):
            event["content"] = cut(event["content"], self.options.max_tool_output_chars)
        return event


class ObsmemEventsFormat(_ChatLines):
    source: ClassVar[str] = "obsmem"

    def read(self, raw: bytes, line: int) -> Iterable[Turn | Skip]:
        record = decode_json_line(raw, line)
        if isinstance(record, Skip):
            return [record]
        if "type" not in record:
            return [Skip("not_an_event", line, problem=True, detail="an obsmem event needs a type")]
        session = self._session(record)
        return [Turn(session, self._cut(record), line)]


class OpenAIChatFormat(_ChatLines):
    source: ClassVar[str] = "openai-chat"

    def read(self, raw: bytes, line: int) -> Iterable[Turn | Skip]:
        record = decode_json_line(raw, line)
        if isinstance(record, Skip):
            return [record]
        session = self._session(record)
        try:
            events = openai_message_to_events(record, self.calls.names)
        except ValueError as exc:
            return [Skip("bad_message", line, problem=True, detail=str(exc))]
        self.calls.trim()  # openai_message_to_events fills the names itself
        return [Turn(session, self._cut(event), line) for event in events]
