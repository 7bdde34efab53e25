"""Aider's chat history: ``.aider.chat.history.md`` at the root of each repository.

Markdown, one continuing file per repository. Each launch starts with ``# aider chat started at
YYYY-MM-DD HH:MM:SS``: a launch is a session (``aider-YYYYMMDDTHHMMSS``), and every event of it is dated
at its start (the file has no other timestamps). Consecutive lines starting with ``#### `` are one user
message; consecutive lines starting with ``> `` are Aider's own output (edits applied, commits, command
output, errors), stored as one ``tool_result`` named ``aider``, except the start-up banner before the
first user message (skipped as ``banner``); everything else is the assistant's reply (code blocks
included, whatever their lines start with).

A block is stored when the next one starts, or at the end of the file: a reply that Aider is still
writing when an import runs is stored as it stood, and what follows it later becomes its own event.
The project is the repository the file sits in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, ClassVar

from obsmem.transcripts.formats import LineFormat
from obsmem.transcripts.records import Skip, Turn, cut, message, tool_result

_START = re.compile(r"^# aider chat started at (\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\s*$")


class AiderFormat(LineFormat):
    source: ClassVar[str] = "aider"
    take_unterminated: ClassVar[bool] = True

    def restore(self, state: dict[str, Any]) -> None:
        self.session: str | None = state.get("session")
        self.stamp: str | None = state.get("stamp")
        self.kind: str | None = state.get("kind")  # the open block: user, output or reply
        self.lines: list[str] = list(state.get("lines", []))
        self.first_line: int = int(state.get("first_line", 0))
        self.seen_user: bool = bool(state.get("seen_user", False))
        self.fenced: bool = bool(state.get("fenced", False))  # inside a code block of the reply

    def state(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "stamp": self.stamp,
            "kind": self.kind,
            "lines": self.lines,
            "first_line": self.first_line,
            "seen_user": self.seen_user,
            "fenced": self.fenced,
        }

    def project_cwd(self) -> str | None:
        return str(self.path.resolve().parent)

    def read(self, raw: bytes, line: int) -> Iterable[Turn | Skip]:
        try:
            text = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            return [Skip("invalid_utf8", line, problem=True, detail="not UTF-8 text")]
        start = _START.match(text)
        if start:
            items = self._close()
            year, month, day, hour, minute, second = start.groups()
            self.session = f"aider-{year}{month}{day}T{hour}{minute}{second}"
            self.stamp = f"{year}-{month}-{day}T{hour}:{minute}:{second}"
            self.seen_user = self.fenced = False
            return items
        if self.session is None:
            return [] if not text.strip() else [Skip("before_first_session", line)]
        if self.kind == "reply" and self.fenced:  # code in a reply may hold lines like "> " or "#### "
            self.fenced = not text.startswith("```")
            self.lines.append(text)
            return []
        if text.startswith("#### "):
            kind, body = "user", text[5:]
        elif text.startswith(">"):
            kind, body = "output", text[2:] if text.startswith("> ") else text[1:]
        else:
            kind, body = "reply", text
        items = []
        if kind != self.kind and (text.strip() or kind != "reply"):
            items = self._close()
            self.kind, self.first_line = kind, line
        if kind == "user":
            self.seen_user = True
        if self.kind is not None:
            self.lines.append(body)
        if kind == "reply" and text.startswith("```"):
            self.fenced = True
        return items

    def finish(self) -> Iterable[Turn | Skip]:
        return self._close()

    def _close(self) -> list[Turn | Skip]:
        kind, lines, line = self.kind, self.lines, self.first_line
        self.kind, self.lines = None, []
        text = "\n".join(lines).strip()
        if kind is None or not text or self.session is None:
            return []
        if kind == "user":
            return [Turn(self.session, message("user", text, self.stamp), line)]
        if kind == "reply":
            return [Turn(self.session, message("assistant", text, self.stamp), line)]
        if not self.seen_user:
            return [Skip("banner", line)]
        limit = self.options.max_tool_output_chars
        failed = any(part.lower().startswith(("error", "traceback")) for part in lines)
        event = tool_result("aider", cut(text, limit), None, self.stamp, limit, error=failed)
        return [Turn(self.session, event, line)]
