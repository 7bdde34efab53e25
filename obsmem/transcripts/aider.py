"""Aider's chat history: ``.aider.chat.history.md`` at the root of each repository.

Markdown, one continuing file per repository. Each launch starts with ``# aider chat started at
YYYY-MM-DD HH:MM:SS``: a launch is a session (``aider-YYYYMMDDTHHMMSS``), and every event of it is dated
at its start (the file has no other timestamps). Consecutive lines starting with ``#### `` are one user
message; consecutive lines starting with ``> `` are Aider's own output (edits applied, commits, command
output, errors), stored as one ``tool_result`` named ``aider``, except the start-up banner before the
first user message (skipped as ``banner``); everything else is the assistant's reply (code blocks
included, whatever their lines start with).

A block is stored when the next one starts, or at the end of the file. The block open at the end of an
import stays open: the watermark records where it starts (never its text), the next import reads it again
from there, and lines appended to it continue it. It is not stored again unchanged; a block that grew
after an import stored it is stored again whole (the shorter event stays: nothing stored is changed).
The project is the repository the file sits in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, ClassVar

from obsmem.transcripts.files import complete_lines
from obsmem.transcripts.formats import LineFormat
from obsmem.transcripts.records import Skip, Turn, cut, message, tool_result

_START = re.compile(r"^# aider chat started at (\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\s*$")


class AiderFormat(LineFormat):
    source: ClassVar[str] = "aider"
    take_unterminated: ClassVar[bool] = True

    def restore(self, state: dict[str, Any]) -> None:
        self.session: str | None = state.get("session")
        self.stamp: str | None = state.get("stamp")
        self.seen_user: bool = bool(state.get("seen_user", False))
        self.offset: int = self.start_offset  # bytes of the file read so far
        # The open block: its kind (user, output or reply), first line and byte offset, and what the end of
        # an earlier import stored of it (its start and length), so it is not stored again unchanged.
        self.kind: str | None = None
        self.lines: list[str] = []
        self.first_line: int = 0
        self.block_start: int = 0
        self.fenced: bool = False  # inside a code block of the reply
        self.emitted: list[int] | None = state.get("emitted")
        if state.get("kind") is None:
            return
        if "block_start" in state:
            self._reread(int(state["block_start"]), int(state.get("first_line", 1)))
            return
        # A watermark of an earlier version, which kept the open block's text: taken back as it is, once.
        self.kind, self.lines = state["kind"], [str(line) for line in state.get("lines", [])]
        self.first_line, self.fenced = int(state.get("first_line", 0)), bool(state.get("fenced", False))
        self.block_start = -1  # unknown: this block is saved the old way until it closes

    def _reread(self, start: int, first_line: int) -> None:
        """Read the open block again from the file: the watermark keeps where it starts, never its text
        (a watermark is exported and must not hold unredacted transcript text)."""
        end, self.offset, emitted = self.offset, start, self.emitted
        for number, (raw, _) in enumerate(complete_lines(self.path, start, take_last=True), first_line):
            if self.offset >= end:
                break
            self.read(raw, number)
            self.emitted = emitted  # its first line "closes" the block before it, which forgets this

    def state(self) -> dict[str, Any]:
        saved: dict[str, Any] = {
            "session": self.session,
            "stamp": self.stamp,
            "kind": self.kind,
            "first_line": self.first_line,
            "seen_user": self.seen_user,
            "emitted": self.emitted,
        }
        if self.block_start >= 0:
            saved["block_start"] = self.block_start
        else:
            saved.update(lines=self.lines, fenced=self.fenced)  # an earlier version's open block (restore)
        return saved

    def project_cwd(self) -> str | None:
        return str(self.path.resolve().parent)

    def read(self, raw: bytes, line: int) -> Iterable[Turn | Skip]:
        try:
            return self._read(raw.decode("utf-8").rstrip("\r\n"), len(raw), line)
        except UnicodeDecodeError:
            # Markdown, not records: the line is kept with its bad bytes replaced (U+FFFD). Dropping it lost a
            # request, and then the output after it, taken for the start-up banner without a request before it.
            problem = Skip("invalid_utf8", line, problem=True, detail="not UTF-8 text: bad bytes stored as U+FFFD")
            return [problem, *self._read(raw.decode("utf-8", "replace").rstrip("\r\n"), len(raw), line)]

    def _read(self, text: str, size: int, line: int) -> list[Turn | Skip]:
        start = self.offset
        self.offset += size
        launch = _START.match(text)
        if launch:
            items = self._close()
            year, month, day, hour, minute, second = launch.groups()
            self.session = f"aider-{year}{month}{day}T{hour}{minute}{second}"
            self.stamp = f"{year}-{month}-{day}T{hour}:{minute}:{second}"
            self.seen_user = False
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
            self.kind, self.first_line, self.block_start = kind, line, start
        if kind == "user":
            self.seen_user = True
        if self.kind is not None:
            self.lines.append(body)
        if kind == "reply" and text.startswith("```"):
            self.fenced = True
        return items

    def finish(self) -> Iterable[Turn | Skip]:
        """The open block as it stands, kept open: lines appended to it later continue it. Stored again
        only if it grew since (see the module docstring)."""
        if self.kind is None or self.emitted == [self.block_start, len(self._text())]:
            return []
        self.emitted = [self.block_start, len(self._text())]
        return self._block()

    def _text(self) -> str:
        return "\n".join(self.lines).strip()

    def _close(self) -> list[Turn | Skip]:
        stored = self.emitted == [self.block_start, len(self._text())]
        items = [] if stored else self._block()
        self.kind, self.lines, self.fenced, self.emitted = None, [], False, None
        return items

    def _block(self) -> list[Turn | Skip]:
        kind, lines, line, text = self.kind, self.lines, self.first_line, self._text()
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
