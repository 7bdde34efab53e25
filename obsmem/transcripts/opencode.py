"""opencode sessions: the SQLite database ``$XDG_DATA_HOME/opencode/opencode.db``, or the JSON tree of
older versions (``storage/session/<project>/<id>.json``, ``storage/message/<session>/<id>.json``,
``storage/part/<message>/<id>.json``).

A session ``(id, parent_id, directory, title, time_created)`` holds messages ``(id, time_created, data)``
whose ``data.role`` is ``user`` or ``assistant``; a message's parts ``(id, data)`` are typed: ``text``
(a message; ``synthetic`` text the agent injected is skipped), ``tool {callID, tool, state}`` (a
``tool_call`` with ``state.input`` and a ``tool_result`` with ``state.output``, or ``state.error`` for a
failed call), ``reasoning`` (skipped unless ``keep_thinking``), ``compaction`` (a ``system`` event), and
``step-start``, ``step-finish``, ``snapshot``, ``patch``, ``file``, ``agent``, ``subtask``, ``retry``
(bookkeeping, skipped). An assistant message that failed (``data.error``: the API call failed, the
output was cut, the user aborted) also gets a ``system`` event ``[error] <name>: <message>``.
Messages are read in creation order and parts in id order; the importer stores the parts after the
last one it stored (keyed ``<message id>/<part id>``). A message still being written
(an assistant message without ``time.completed`` or an error, or a tool still pending or running) is left,
with what follows it, for the next import, unless a later assistant message of the session is finished:
opencode writes one reply at a time, so a reply it left unfinished then (it was killed mid-reply) never
will be, and is imported as it is, a tool never finished as failed with ``[error] the tool never
finished``, followed by a ``system`` event ``[error] the reply was cut off``. A later user message does not
count: opencode writes a prompt queued while a reply streams before the reply is finished.

Child sessions (sub-agents started by the task tool) are stored as their own session, named
``<parent id>:<child id>``. The database is opened read-only; a locked database is reported and skipped.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import apsw

from obsmem.transcripts.files import FileStamp
from obsmem.transcripts.files import stamp as file_stamp
from obsmem.transcripts.formats import DocumentFormat
from obsmem.transcripts.records import (
    SessionDoc,
    Skip,
    Turn,
    iso_stamp,
    message,
    safe_name,
    text_or_none,
    tool_call,
    tool_result,
)

_BOOKKEEPING = frozenset({"step-start", "step-finish", "snapshot", "patch", "file", "agent", "subtask", "retry"})


def _loads(text: Any) -> dict[str, Any] | None:
    try:
        value = json.loads(text) if isinstance(text, (str, bytes)) else None
    except (
        ValueError,
        RecursionError,
    ):  # ValueError: JSONDecodeError, UnicodeDecodeError, an integer past 4,300 digits
        return None
    return value if isinstance(value, dict) else None


class _Session:
    """Turns one session's messages and parts into a :class:`SessionDoc`."""

    def __init__(self, fmt: DocumentFormat, session_id: str, parent: Any, directory: Any) -> None:
        name = f"{parent}:{session_id}" if isinstance(parent, str) and parent else session_id
        self.doc = SessionDoc(name, directory if isinstance(directory, str) else None)
        self.options = fmt.options
        self.skips: list[Skip] = []

    def messages(self, messages: list[tuple[str, dict[str, Any], list[tuple[str, Any]], int]]) -> None:
        """Add the session's messages ``(id, data, parts, row)`` in order, up to the first one still being
        written; one that a later finished reply shows was left unfinished is added as it is."""
        abandoned = [False] * len(messages)
        later_reply = False
        for position in range(len(messages) - 1, -1, -1):
            abandoned[position] = later_reply
            later_reply = later_reply or (
                messages[position][1].get("role") == "assistant" and _finished(messages[position][1])
            )
        for (message_id, data, parts, row), cut_off in zip(messages, abandoned, strict=True):
            if not self.message(message_id, data, parts, row, abandoned=cut_off):
                return

    def message(
        self, message_id: str, data: dict[str, Any], parts: list[tuple[str, Any]], row: int, *, abandoned: bool
    ) -> bool:
        """Add a message's parts; False when it is still being written (stop the session here). An
        ``abandoned`` message (a later reply is finished) is added as it is: it will never be finished."""
        role = data.get("role")
        time = data.get("time") if isinstance(data.get("time"), dict) else {}
        unfinished = not _finished(data)
        if unfinished and not abandoned:
            return False
        stamp = iso_stamp(time.get("created"))
        turns: list[Turn] = []
        for part_id, raw in parts:
            part = raw if isinstance(raw, dict) else _loads(raw)
            if part is None:
                self.skips.append(
                    Skip("malformed_json", row, problem=True, detail=f"part {safe_name(part_id)} is not JSON")
                )
                continue
            events = self._part(role, part, stamp, row, abandoned=abandoned)
            if events is None:
                return False
            key = f"{message_id}/{part_id}"
            turns.extend(
                Turn(self.doc.session_id, e, row, self.doc.cwd, key=f"{key}#{i}") for i, e in enumerate(events)
            )
        failure = _error_text(data.get("error")) if role == "assistant" else None
        if failure is not None:
            event = message("system", f"[error] {failure}", stamp)
            turns.append(Turn(self.doc.session_id, event, row, self.doc.cwd, key=f"{message_id}/error"))
        elif unfinished:
            event = message("system", "[error] the reply was cut off", stamp)
            turns.append(Turn(self.doc.session_id, event, row, self.doc.cwd, key=f"{message_id}/cut"))
        self.doc.turns.extend(turns)
        return True

    def _part(
        self, role: Any, part: dict[str, Any], stamp: object, row: int, *, abandoned: bool
    ) -> list[dict[str, Any]] | None:
        kind = part.get("type")
        limit = self.options.max_tool_output_chars
        if kind == "text":
            if part.get("synthetic") is True:
                self.skips.append(Skip("synthetic", row))
                return []
            text = part.get("text") if isinstance(part.get("text"), str) else ""
            return [message("user" if role == "user" else "assistant", text, stamp)]
        if kind == "tool":
            state = part.get("state") if isinstance(part.get("state"), dict) else {}
            status = state.get("status")
            never_finished = status in ("pending", "running")
            if never_finished and not abandoned:
                return None
            name = part.get("tool") if isinstance(part.get("tool"), str) else None
            call_id = part.get("callID") if isinstance(part.get("callID"), str) else None
            times = state.get("time") if isinstance(state.get("time"), dict) else {}
            when = iso_stamp(times.get("start")) or stamp
            done = iso_stamp(times.get("end")) or when
            failed = status == "error" or never_finished
            output = (
                "the tool never finished" if never_finished else state.get("error") if failed else state.get("output")
            )
            text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
            return [
                tool_call(name, state.get("input"), call_id, when, limit),
                tool_result(name, text, call_id, done, limit, error=failed),
            ]
        if kind == "reasoning":
            text = part.get("text")
            if self.options.keep_thinking and isinstance(text, str) and text:
                return [message("assistant", f"[thinking] {text}", stamp)]
            self.skips.append(Skip("reasoning", row))
            return []
        if kind == "compaction":
            return [message("system", "[compaction] the conversation was compacted", stamp)]
        if text_or_none(kind) in _BOOKKEEPING:
            self.skips.append(Skip(kind, row))
            return []
        name = kind if isinstance(kind, str) else "?"
        self.skips.append(Skip("unknown_part", row, problem=True, detail=f"unknown part type {safe_name(name)!r}"))
        return []


def _finished(data: dict[str, Any]) -> bool:
    """Whether a message is written finished: a user message always, a reply once it has
    ``time.completed`` or an error."""
    time = data.get("time") if isinstance(data.get("time"), dict) else {}
    return data.get("role") != "assistant" or bool(time.get("completed")) or bool(data.get("error"))


def _error_text(error: Any) -> str | None:
    """An assistant message's ``error`` (``{name, data: {message}}``: the API call failed, the output was
    cut, the user aborted) as text, or None when the message has none."""
    if not error:
        return None
    if not isinstance(error, dict):
        return "the reply failed"
    name = safe_name(error.get("name")) if error.get("name") is not None else "error"
    data: dict[str, Any] = error["data"] if isinstance(error.get("data"), dict) else {}
    said = data.get("message")
    return f"{name}: {said}" if isinstance(said, str) and said else name


class OpencodeDatabaseFormat(DocumentFormat):
    """opencode.db, opened read-only."""

    source: ClassVar[str] = "opencode"

    def sessions(self) -> Iterator[SessionDoc | Skip]:
        try:
            conn = apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READONLY)
        except apsw.Error:
            self.read_whole = False
            yield Skip("unreadable_database", 0, problem=True, detail="the database cannot be opened")
            return
        try:
            conn.set_busy_timeout(2000)
            yield from self._read(conn)
        except apsw.BusyError:
            self.read_whole = False
            yield Skip("database_locked", 0, problem=True, detail="the database stayed locked; try again later")
        except apsw.Error as exc:
            self.read_whole = False
            yield Skip("unreadable_database", 0, problem=True, detail=f"SQLite: {type(exc).__name__}")
        finally:
            conn.close()

    def _read(self, conn: apsw.Connection) -> Iterator[SessionDoc | Skip]:
        conn.execute("BEGIN")  # one snapshot: sessions, messages and parts agree
        try:
            sessions = conn.execute("SELECT id, parent_id, directory FROM session ORDER BY time_created, id").fetchall()
            for session_id, parent, directory in sessions:
                reader = _Session(self, str(session_id), parent, directory)
                rows = conn.execute(
                    "SELECT m.rowid, m.id, m.data, p.id, p.data FROM message m LEFT JOIN part p ON p.message_id = m.id"
                    " WHERE m.session_id = ? ORDER BY m.time_created, m.id, p.id",
                    (session_id,),
                ).fetchall()
                grouped: dict[str, tuple[int, Any, list[tuple[str, Any]]]] = {}
                for row, message_id, data, part_id, part in rows:
                    entry = grouped.setdefault(message_id, (row, data, []))
                    if part_id is not None:
                        entry[2].append((str(part_id), part))
                messages: list[tuple[str, dict[str, Any], list[tuple[str, Any]], int]] = []
                for message_id, (row, data, parts) in grouped.items():
                    parsed = _loads(data)
                    if parsed is None:
                        reader.skips.append(
                            Skip("malformed_json", row, problem=True, detail="message data is not JSON")
                        )
                        continue
                    messages.append((str(message_id), parsed, parts, row))
                reader.messages(messages)
                yield from reader.skips
                yield reader.doc
        finally:
            conn.execute("COMMIT")


class OpencodeTreeFormat(DocumentFormat):
    """One session of the older JSON storage tree; ``path`` is ``storage/session/<project>/<id>.json``."""

    source: ClassVar[str] = "opencode"

    def storage(self) -> Path:
        return self.path.parent.parent.parent

    def stamp(self) -> FileStamp:
        """What changes when the session gains a reply: opencode touches the session file when a prompt
        starts, not when the reply's messages and parts are written, so the session file's own stamp
        missed every reply written after an import.

        Stat-ing every part file cost most of a look at a long session, so only what can change in a way
        an import would see is looked at: the session file and every message file (their sizes and times),
        the names of each message's part files (a part added or removed), and the sizes and times of the
        last message's parts (streamed, rewritten in place). A part of an earlier message rewritten in place
        is not seen, and need not be: an import takes a message only once it is finished, and opencode
        writes a message finished (``time.completed``, or its error) after its last part, so that write is
        seen (a reply left unfinished is taken once a later reply is written finished, a write of another
        message file); a part of a message already imported is never imported again (parts are resumed by
        id)."""
        own = file_stamp(self.path)
        size, newest = own.size, own.mtime_ns
        info = _read_json(self.path)
        session = info["id"] if info is not None and isinstance(info.get("id"), str) else self.path.stem
        messages = self.storage() / "message" / session
        names = sorted(_json_names(messages))
        for name in names:
            try:
                info_of = os.stat(messages / name)
            except OSError:  # deleted meanwhile: the next look sees the change
                continue
            size, newest = size + info_of.st_size, max(newest, info_of.st_mtime_ns)
            parts = self.storage() / "part" / name.removesuffix(".json")
            part_names = sorted(_json_names(parts))
            size += len(part_names) + zlib.crc32("\0".join(part_names).encode("utf-8", "surrogateescape"))
            if name != names[-1]:
                continue
            for part in part_names:
                try:
                    info_of = os.stat(parts / part)
                except OSError:
                    continue
                size, newest = size + info_of.st_size, max(newest, info_of.st_mtime_ns)
        return FileStamp(size, newest)

    def sessions(self) -> Iterator[SessionDoc | Skip]:
        info = _read_json(self.path)
        if info is None or not isinstance(info.get("id"), str):
            yield Skip("malformed_json", 1, problem=True, detail="the session file is not a session object")
            return
        reader = _Session(self, info["id"], info.get("parentID"), info.get("directory"))
        messages: list[tuple[float, str, dict[str, Any]]] = []
        for file in sorted((self.storage() / "message" / info["id"]).glob("*.json")):
            data = _read_json(file)
            if data is None:
                reader.skips.append(
                    Skip("malformed_json", 1, problem=True, detail=f"message file {safe_name(file.stem)}")
                )
                continue
            time = data.get("time") if isinstance(data.get("time"), dict) else {}
            created = time.get("created")
            number = created if isinstance(created, (int, float)) and not isinstance(created, bool) else 0
            messages.append((number, file.stem, data))
        ordered: list[tuple[str, dict[str, Any], list[tuple[str, Any]], int]] = []
        for _, message_id, data in sorted(messages, key=lambda item: (item[0], item[1])):
            parts: list[tuple[str, Any]] = []
            for file in sorted((self.storage() / "part" / message_id).glob("*.json")):
                parts.append((file.stem, _read_json(file) or file.read_bytes()))
            ordered.append((message_id, data, parts, 1))
        reader.messages(ordered)
        yield from reader.skips
        yield reader.doc


def _json_names(directory: Path) -> list[str]:
    """The names of the ``*.json`` files of ``directory`` (none when it does not exist), listed without a
    stat of each."""
    try:
        with os.scandir(directory) as entries:
            return [entry.name for entry in entries if entry.name.endswith(".json")]
    except OSError:  # not made yet, or deleted meanwhile: the next look sees the change
        return []


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return _loads(path.read_bytes())
    except OSError:
        return None
