"""Gemini CLI chats: ``~/.gemini/tmp/<project hash>/chats/session-*.json`` or ``.jsonl``.

A conversation is ``{sessionId, projectHash, startTime, lastUpdated, messages, summary?, kind?}``; a
message ``{id, timestamp, type: user | gemini | info | error | warning, content, toolCalls?, thoughts?}``
with tool calls ``{id, name, args, result?, status}``. Older versions rewrite one ``.json`` file per
session; newer ones append to a ``.jsonl`` file: the conversation's fields on the first line, then
messages (a message whose id was seen before replaces it), ``{"$set": {...}}`` updates and
``{"$rewindTo": <message id>}`` (everything after that message is dropped).

Both are read whole and folded into the conversation as it stands; the importer then stores the
messages after the last one it stored (messages are keyed by id). A ``user`` message is a user event; a
``gemini`` message its text and, per tool call, a ``tool_call`` and a ``tool_result``; ``error``
messages are ``system`` events; ``info`` and ``warning`` messages and thoughts are skipped. A message
whose tool calls are still running is left for the next import. Sub-agent conversations
(``kind: "subagent"``) are stored as the session ``<sessionId>:subagent``.

The project is known only by ``projectHash`` (SHA-256 of the project's root path): the importer matches
it against the paths of ``project_map``, else names the project ``gemini-<first 12 hex digits>``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, ClassVar

from obsmem.transcripts.files import complete_lines
from obsmem.transcripts.formats import DocumentFormat, decode_json_line
from obsmem.transcripts.records import (
    SessionDoc,
    Skip,
    Turn,
    message,
    parts_text,
    safe_name,
    text_or_none,
    tool_call,
    tool_result,
)

_FINAL = frozenset({"success", "error", "cancelled"})
_MESSAGE_TYPES = frozenset({"user", "gemini", "info", "error", "warning"})


def _result_text(call: dict[str, Any]) -> str:
    result = call.get("result")
    texts: list[str] = []
    for part in result if isinstance(result, list) else [result] if isinstance(result, dict) else []:
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("text"), str):
            texts.append(part["text"])
        response = (
            part.get("functionResponse", {}).get("response") if isinstance(part.get("functionResponse"), dict) else None
        )
        if isinstance(response, dict):
            value = response.get("output", response.get("error", response))
            texts.append(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    if not texts and isinstance(call.get("resultDisplay"), str):
        texts.append(call["resultDisplay"])
    return "\n".join(texts)


def _tool_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    calls = message.get("toolCalls")
    return [call for call in calls if isinstance(call, dict)] if isinstance(calls, list) else []


class _Messages:
    """A conversation's messages in order, found by id: a message whose id repeats replaces the earlier one."""

    def __init__(self, items: list[Any] | None = None) -> None:
        self.items: list[dict[str, Any]] = []
        self.index: dict[str | int, int] = {}
        for item in items or []:
            if isinstance(item, dict):
                self.put(item)

    def put(self, message: dict[str, Any]) -> None:
        key = message.get("id")
        if isinstance(key, (str, int)) and key in self.index:
            self.items[self.index[key]] = message
            return
        if isinstance(key, (str, int)):
            self.index[key] = len(self.items)
        self.items.append(message)

    def rewind(self, key: Any) -> bool:
        """Drop every message after the one with id ``key``; False when there is none."""
        if not isinstance(key, (str, int)) or key not in self.index:
            return False
        keep = self.index[key] + 1
        for dropped in self.items[keep:]:
            dropped_key = dropped.get("id")
            if isinstance(dropped_key, (str, int)):
                self.index.pop(dropped_key, None)
        del self.items[keep:]
        return True


class GeminiCliFormat(DocumentFormat):
    source: ClassVar[str] = "gemini-cli"

    def sessions(self) -> Iterator[SessionDoc | Skip]:
        problems: list[Skip] = []
        conversation = self._jsonl(problems) if self.path.suffix == ".jsonl" else self._json(problems)
        yield from problems
        if conversation is None:
            return
        session = conversation.get("sessionId")
        if not isinstance(session, str) or not session:
            yield Skip("no_session", 1, problem=True, detail="the conversation has no sessionId")
            return
        if conversation.get("kind") == "subagent":
            session = f"{session}:subagent"
        project_hash = conversation.get("projectHash")
        doc = SessionDoc(session, None, project_hash=project_hash if isinstance(project_hash, str) else None)
        messages = conversation.get("messages")
        for position, item in enumerate(messages if isinstance(messages, list) else []):
            if not isinstance(item, dict):
                yield Skip("bad_message", position + 1, problem=True, detail="a message that is not an object")
                continue
            calls = _tool_calls(item)
            if any(text_or_none(call.get("status")) not in _FINAL for call in calls):
                break  # still running: this message and what follows wait for the next import
            yield from self._turns(doc, item, position + 1)
        yield doc

    def _json(self, problems: list[Skip]) -> dict[str, Any] | None:
        try:
            data = json.loads(self.path.read_bytes().decode("utf-8"))
        except UnicodeDecodeError:
            problems.append(Skip("invalid_utf8", 1, problem=True, detail="not UTF-8 text"))
            return None
        except (ValueError, RecursionError):  # ValueError: JSONDecodeError, or an integer past 4,300 digits
            problems.append(Skip("malformed_json", 1, problem=True, detail="the file is not valid JSON"))
            return None
        if not isinstance(data, dict):
            problems.append(Skip("not_an_object", 1, problem=True, detail="the file is not a JSON object"))
            return None
        return data

    def _jsonl(self, problems: list[Skip]) -> dict[str, Any] | None:
        conversation: dict[str, Any] = {}
        messages = _Messages()
        for number, (raw, _) in enumerate(complete_lines(self.path, 0), start=1):
            record = decode_json_line(raw, number)
            if isinstance(record, Skip):
                if record.problem:
                    problems.append(record)
                continue
            if "$rewindTo" in record:
                if not messages.rewind(record["$rewindTo"]):
                    problems.append(Skip("missing_parent", number, problem=True, detail="$rewindTo names no message"))
            elif "$set" in record:
                update = record["$set"]
                if not isinstance(update, dict):
                    problems.append(Skip("bad_update", number, problem=True, detail="$set is not an object"))
                    continue
                if isinstance(update.get("messages"), list):
                    messages = _Messages(update["messages"])
                conversation.update({k: v for k, v in update.items() if k != "messages"})
            elif text_or_none(record.get("type")) in _MESSAGE_TYPES and "id" in record:
                messages.put(record)
            elif "sessionId" in record:
                if isinstance(record.get("messages"), list):
                    messages = _Messages(record["messages"])
                conversation.update({k: v for k, v in record.items() if k != "messages"})
            else:
                problems.append(Skip("unknown_type", number, problem=True, detail="a record of unknown shape"))
        if not conversation and not messages.items:
            return None
        conversation["messages"] = messages.items
        return conversation

    def _turns(self, doc: SessionDoc, item: dict[str, Any], position: int) -> Iterator[Skip]:
        kind = item.get("type")
        key = str(item.get("id", position))
        stamp = item.get("timestamp")  # not only text: validation reports a bad one
        limit = self.options.max_tool_output_chars

        def add(index: int, event: dict[str, Any]) -> None:
            doc.turns.append(Turn(doc.session_id, event, position, key=f"{key}#{index}"))

        if kind == "user":
            add(0, message("user", parts_text(item.get("content")), stamp))
        elif kind == "gemini":
            index = 0
            thoughts = item.get("thoughts")
            if isinstance(thoughts, list) and thoughts:
                if self.options.keep_thinking:
                    text = "\n".join(
                        f"{t.get('subject', '')}: {t.get('description', '')}" for t in thoughts if isinstance(t, dict)
                    )
                    add(index, message("assistant", f"[thinking] {text}", stamp))
                    index += 1
                else:
                    yield Skip("thoughts", position)
            text = parts_text(item.get("content"))
            if text:
                add(index, message("assistant", text, stamp))
                index += 1
            for call in _tool_calls(item):
                name = call.get("name") if isinstance(call.get("name"), str) else None
                call_id = call.get("id") if isinstance(call.get("id"), str) else None
                when = stamp if call.get("timestamp") is None else call["timestamp"]
                add(index, tool_call(name, call.get("args"), call_id, when, limit))
                error = call.get("status") != "success"
                add(index + 1, tool_result(name, _result_text(call), call_id, when, limit, error=error))
                index += 2
        elif kind == "error":
            add(0, message("system", f"[error] {parts_text(item.get('content'))}", stamp))
        elif kind in ("info", "warning"):
            yield Skip(kind, position)
        else:
            name = kind if isinstance(kind, str) else "?"
            yield Skip("unknown_type", position, problem=True, detail=f"unknown message type {safe_name(name)!r}")
