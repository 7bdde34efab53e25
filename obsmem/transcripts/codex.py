"""OpenAI Codex CLI rollouts: ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl``.

Each line is ``{timestamp, type, payload}``:

- ``session_meta`` names the session (``payload.id``) and its working directory; very early rollouts
  began with a bare header ``{id, timestamp, instructions?}`` instead, and their items had no
  ``payload`` wrapper (both are read).
- ``response_item``: ``message`` (``user`` / ``assistant`` text; ``developer`` and ``system`` messages
  and the ``<environment_context>`` / ``<user_instructions>`` preambles the CLI injects are skipped),
  ``function_call`` / ``custom_tool_call`` / ``local_shell_call`` / ``web_search_call`` (a ``tool_call``;
  arguments that are a JSON string are parsed), ``function_call_output`` / ``custom_tool_call_output``
  (a ``tool_result``), ``tool_search_call`` / ``tool_search_output`` (a call and its result, the tools
  found), ``image_generation_call`` (its prompt as a call, the outcome as a result; the image data is not
  text), ``reasoning`` (skipped unless ``keep_thinking``; its summary is kept then), ``ghost_snapshot``
  (a snapshot of the working tree) and ``compaction`` / ``compaction_summary`` (encrypted context): skipped, counted.
- ``compacted``: the summary written when the context was compacted, stored as a ``system`` message.
- ``event_msg`` (UI mirrors of the items above) and ``turn_context``: skipped and counted.

The session id is the first ``session_meta.id``; before one is seen, the uuid in the file name. A forked
rollout starts with its own ``session_meta`` and then copies its parent's items, the parent's
``session_meta`` included: a later ``session_meta`` is skipped as ``replayed`` and changes nothing, so
the fork's turns stay in the fork's session. Compressed
rollouts (``.jsonl.gz``, ``.jsonl.zst``) are read the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

from obsmem.transcripts.formats import LineFormat, decode_json_line, first_cwd
from obsmem.transcripts.records import (
    CallNames,
    Skip,
    Turn,
    message,
    parts_text,
    safe_name,
    text_or_none,
    tool_call,
    tool_result,
)

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_PREAMBLES = ("<environment_context>", "<user_instructions>", "<permissions instructions>", "# AGENTS.md")
_ITEM_TYPES = frozenset(
    {
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "local_shell_call",
        "web_search_call",
        "image_generation_call",
        "tool_search_call",
        "tool_search_output",
        "ghost_snapshot",
        "compaction",
        "compaction_summary",
    }
)
_SKIPPED = frozenset({"event_msg", "turn_context"})
# Items Codex persists that hold nothing to read: a snapshot of the working tree (a git object id) and the
# encrypted context of a remote compaction. Counted as skipped under their own name.
_OPAQUE_ITEMS = {"ghost_snapshot": "ghost_snapshot", "compaction": "compaction", "compaction_summary": "compaction"}


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):  # ValueError: JSONDecodeError, or an integer past 4,300 digits
            return raw
    return raw


def _output_text(output: Any) -> tuple[str, bool]:
    """A call's output as text, and whether it failed (``{"content", "success": false}`` or an exit code)."""
    if isinstance(output, dict):
        failed = output.get("success") is False
        return parts_text(output.get("content", output.get("output"))), failed
    if isinstance(output, str):
        parsed = _arguments(output)
        if isinstance(parsed, dict) and "output" in parsed:
            meta = parsed.get("metadata")
            code = meta.get("exit_code") if isinstance(meta, dict) else None
            return parts_text(parsed.get("output")), isinstance(code, int) and code != 0
        return output, False
    return parts_text(output), False


class CodexFormat(LineFormat):
    source: ClassVar[str] = "codex"

    def restore(self, state: dict[str, Any]) -> None:
        match = _UUID.search(self.path.name)
        self.session: str | None = state.get("session") or (match.group(0).lower() if match else None)
        # The first session_meta names the file's session; a forked rollout then copies its parent's items,
        # the parent's session_meta included, which must not move what follows into the parent.
        self.named: bool = bool(state.get("named", False))
        self.calls = CallNames(state.get("calls"))

    def state(self) -> dict[str, Any]:
        saved = self.calls.state(self.session)
        if self.named:
            saved["named"] = True
        return saved

    def _session_meta(self, session_id: Any, line: int) -> list[Turn | Skip]:
        if self.named:
            return [Skip("replayed", line)]  # a parent's session_meta copied into a fork
        if isinstance(session_id, str) and session_id:
            self.session, self.named = session_id, True
        return [Skip("session_meta", line)]

    def project_cwd(self) -> str | None:
        return first_cwd(self.path, ("payload.cwd", "cwd"))

    def read(self, raw: bytes, line: int) -> Iterable[Turn | Skip]:
        record = decode_json_line(raw, line)
        if isinstance(record, Skip):
            return [record]
        kind = text_or_none(record.get("type"))
        payload = record.get("payload")
        stamp = record.get("timestamp")  # not only text: validation reports a bad one
        if kind is None and isinstance(record.get("id"), str):  # the bare header of early rollouts
            return self._session_meta(record["id"], line)
        if kind in _ITEM_TYPES and payload is None:  # early rollouts: the item itself
            kind, payload = "response_item", record
        if kind == "session_meta":
            return self._session_meta(payload.get("id") if isinstance(payload, dict) else None, line)
        if kind in _SKIPPED:
            return [Skip(kind, line)]
        if self.session is None:
            return [Skip("no_session", line, problem=True, detail="an item before any session_meta")]
        if kind == "compacted":
            text = payload.get("message") if isinstance(payload, dict) else None
            summary = text if isinstance(text, str) else ""
            return [Turn(self.session, message("system", f"[compaction summary] {summary}", stamp), line)]
        if kind != "response_item" or not isinstance(payload, dict):
            name = kind if isinstance(kind, str) else "?"
            return [Skip("unknown_type", line, problem=True, detail=f"unknown record type {safe_name(name)!r}")]
        return [
            item if isinstance(item, Skip) else Turn(self.session, item, line)
            for item in self._item(payload, stamp, line)
        ]

    def _item(self, item: dict[str, Any], stamp: object, line: int) -> Iterator[Any]:
        kind = item.get("type")
        limit = self.options.max_tool_output_chars
        if kind == "message":
            role = item.get("role")
            text = parts_text(item.get("content"))
            if role not in ("user", "assistant"):
                yield Skip("instructions", line)
            elif role == "user" and text.lstrip().startswith(_PREAMBLES):
                yield Skip("context_preamble", line)
            else:
                yield message(role, text, stamp)
        elif kind == "reasoning":
            summary = parts_text(item.get("summary"))
            if self.options.keep_thinking and summary:
                yield message("assistant", f"[thinking] {summary}", stamp)
            else:
                yield Skip("reasoning", line)
        elif kind in ("function_call", "custom_tool_call"):
            self.calls.add(item.get("call_id"), item.get("name"))
            args = _arguments(item.get("arguments", item.get("input")))
            yield tool_call(_str(item.get("name")), args, _str(item.get("call_id")), stamp, limit)
        elif kind == "local_shell_call":
            self.calls.add(item.get("call_id"), "local_shell")
            yield tool_call("local_shell", item.get("action"), _str(item.get("call_id")), stamp, limit)
        elif kind == "web_search_call":
            yield tool_call("web_search", item.get("action"), _str(item.get("id")), stamp, limit)
        elif kind in _OPAQUE_ITEMS:
            yield Skip(_OPAQUE_ITEMS[kind], line)
        elif kind == "tool_search_call":
            self.calls.add(item.get("call_id"), "tool_search")
            yield tool_call("tool_search", item.get("arguments"), _str(item.get("call_id")), stamp, limit)
        elif kind == "tool_search_output":
            call_id = _str(item.get("call_id"))
            tools = json.dumps(item.get("tools", []), ensure_ascii=False)
            failed = item.get("status") not in (None, "completed")
            yield tool_result("tool_search", tools, call_id, stamp, limit, error=failed)
        elif kind == "image_generation_call":
            yield from self._image(item, stamp, limit)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = item.get("call_id")
            text, failed = _output_text(item.get("output"))
            yield tool_result(self.calls.get(call_id), text, _str(call_id), stamp, limit, error=failed)
        else:
            name = kind if isinstance(kind, str) else "?"
            yield Skip("unknown_item", line, problem=True, detail=f"unknown response item {safe_name(name)!r}")

    def _image(self, item: dict[str, Any], stamp: object, limit: int) -> Iterator[Any]:
        """An image generated by the model's built-in tool: the prompt as its call, the outcome as its
        result (the image itself, base64 data, is not text to remember)."""
        call_id = _str(item.get("id"))
        prompt = _str(item.get("revised_prompt"))
        yield tool_call("image_generation", {"prompt": prompt} if prompt else {}, call_id, stamp, limit)
        status = _str(item.get("status")) or "completed"
        failed = status not in ("completed", "generating", "in_progress")
        outcome = "an image was generated" if item.get("result") else f"image generation {safe_name(status)}"
        yield tool_result("image_generation", outcome, call_id, stamp, limit, error=failed)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
