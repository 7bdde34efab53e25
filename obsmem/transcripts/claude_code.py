"""Claude Code sessions: ``~/.claude/projects/<cwd with / as ->/<sessionId>.jsonl``.

One JSON record per line, tagged by ``type``:

- ``user``: ``message.content`` is the user's text, or parts: ``text``, ``tool_result {tool_use_id,
  content, is_error}`` (a tool's output: stored as a ``tool_result`` event naming its call), ``image``
  (skipped). ``isMeta`` lines (injected by the agent, not typed by the user) are skipped; the summary
  written at a compaction (``isCompactSummary``) is stored as a ``system`` message.
- ``assistant``: ``message.content`` parts: ``text`` (a message), ``tool_use {id, name, input}`` (a
  ``tool_call``), ``thinking`` / ``redacted_thinking`` (skipped unless ``keep_thinking``).
- ``system``: a ``compact_boundary``, error-level records and ``api_error`` records (a failed API call
  being retried) are stored as ``system`` messages (errors start ``[error] ``); other system records
  are UI notices and are skipped.

An ``assistant`` line the agent wrote itself for a failed API call (``isApiErrorMessage``, model
``<synthetic>``) is not a reply: it is stored as a ``system`` ``[error] `` message.
- ``summary``, ``file-history-snapshot``, ``queue-operation``, ``progress``, ``attachment``, ``ai-title``
  and the like: bookkeeping, skipped and counted. Any other type is reported as ``unknown_type``.

Every record carries a ``uuid``: the importer imports a record once, whichever file it appears in (a
resumed session's file replays the earlier session's records; some versions write a record twice).

Sub-agents (``isSidechain`` with an ``agentId``, in ``agent-*.jsonl`` beside the session or in its
``subagents/`` folder) are stored as their own session, ``<parent session>:agent-<agentId>``, so their
events never interleave with the parent's and the name says where they came from. A record whose
``parentUuid`` names no record read before it in this import is stored, and reported as
``missing_parent``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

from obsmem.transcripts.formats import LineFormat, decode_json_line, first_cwd
from obsmem.transcripts.records import (
    CallNames,
    Skip,
    Turn,
    message,
    parts_text,
    record_id,
    safe_name,
    tool_call,
    tool_result,
)

BOOKKEEPING = frozenset(
    {
        "summary",
        "file-history-snapshot",
        "queue-operation",
        "progress",
        "attachment",
        "ai-title",
        "custom-title",
        "tag",
        "last-prompt",
        "pr-link",
    }
)


class ClaudeCodeFormat(LineFormat):
    source: ClassVar[str] = "claude-code"

    def restore(self, state: dict[str, Any]) -> None:
        self.calls = CallNames(state.get("calls"))
        self.session: str | None = state.get("session")
        # Parents are checked against what this import has read; one that resumes mid-file knows nothing
        # of the lines before the watermark, so it checks nothing until its own records start a chain.
        self.seen: set[str] = set()
        self.checking_parents = not state

    def state(self) -> dict[str, Any]:
        return self.calls.state(self.session)

    def project_cwd(self) -> str | None:
        return first_cwd(self.path, ("cwd",))

    def read(self, raw: bytes, line: int) -> Iterable[Turn | Skip]:
        record = decode_json_line(raw, line)
        if isinstance(record, Skip):
            return [record]
        uuid = record.get("uuid")
        if isinstance(uuid, str):
            self.seen.add(uuid)  # bookkeeping records have uuids too, and conversation records name them
        kind = record.get("type")
        if not isinstance(kind, str):
            return [Skip("no_type", line, problem=True, detail="the record has no type")]
        if kind in BOOKKEEPING:
            return [Skip(kind, line)]
        if kind not in ("user", "assistant", "system"):
            return [Skip("unknown_type", line, problem=True, detail=f"unknown record type {safe_name(kind)!r}")]
        session = self._session(record)
        if session is None:
            return [Skip("no_session", line, problem=True, detail="the record has no sessionId")]
        items: list[Turn | Skip] = []
        parent = record.get("parentUuid")
        if self.checking_parents and isinstance(parent, str) and parent not in self.seen:
            items.append(Skip("missing_parent", line, problem=True, detail="parentUuid names no earlier record"))
        cwd = record.get("cwd") if isinstance(record.get("cwd"), str) else None
        stamp = record.get("timestamp")  # not only text: validation reports a bad one
        events = list(self._events(kind, record, stamp, line))
        kept_id = record_id(uuid)
        items.extend(
            item if isinstance(item, Skip) else Turn(session, item, line, cwd, record_id=kept_id) for item in events
        )
        return items

    def _session(self, record: dict[str, Any]) -> str | None:
        session = record.get("sessionId")
        if not isinstance(session, str) or not session:
            return self.session
        self.session = session
        agent = record.get("agentId")
        if record.get("isSidechain") is True:
            return f"{session}:agent-{agent}" if isinstance(agent, str) and agent else f"{session}:sidechain"
        return session

    def _events(self, kind: str, record: dict[str, Any], stamp: object, line: int) -> Iterator[Any]:
        body = record.get("message")
        if kind == "system":
            yield from self._system(record, stamp, line)
            return
        if not isinstance(body, dict):
            yield Skip("no_message", line, problem=True, detail=f"a {kind} record without a message object")
            return
        content = body.get("content")
        if kind == "user":
            yield from self._user(record, content, stamp, line)
        elif record.get("isApiErrorMessage") is True or body.get("model") == "<synthetic>":
            # The agent writes a failed API call as an assistant line of its own making: not a reply.
            yield message("system", f"[error] {parts_text(content) or 'the API call failed'}", stamp)
        else:
            yield from self._assistant(content, stamp, line)

    def _user(self, record: dict[str, Any], content: Any, stamp: object, line: int) -> Iterator[Any]:
        if record.get("isMeta") is True:
            yield Skip("meta", line)
            return
        if record.get("isCompactSummary") is True:
            yield message("system", f"[compaction summary] {parts_text(content)}", stamp)
            return
        if isinstance(content, str):
            yield message("user", content, stamp)
            return
        if not isinstance(content, list):
            yield Skip("bad_content", line, problem=True, detail="message.content is neither text nor a list")
            return
        limit = self.options.max_tool_output_chars
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and isinstance(part.get("text"), str):
                yield message("user", part["text"], stamp)
            elif kind == "tool_result":
                call_id = part.get("tool_use_id")
                output = parts_text(part.get("content"))
                error = part.get("is_error") is True
                yield tool_result(self.calls.get(call_id), output, call_id, stamp, limit, error=error)
            elif kind in ("image", "document"):
                yield Skip(kind, line)
            else:
                yield Skip("unknown_part", line, problem=True, detail="a content part of unknown type")

    def _assistant(self, content: Any, stamp: object, line: int) -> Iterator[Any]:
        if isinstance(content, str):
            yield message("assistant", content, stamp)
            return
        if not isinstance(content, list):
            yield Skip("bad_content", line, problem=True, detail="message.content is neither text nor a list")
            return
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and isinstance(part.get("text"), str):
                yield message("assistant", part["text"], stamp)
            elif kind == "tool_use":
                self.calls.add(part.get("id"), part.get("name"))
                name = part.get("name") if isinstance(part.get("name"), str) else None
                call_id = part.get("id") if isinstance(part.get("id"), str) else None
                yield tool_call(name, part.get("input"), call_id, stamp, self.options.max_tool_output_chars)
            elif kind in ("thinking", "redacted_thinking"):
                thought = part.get("thinking")
                if self.options.keep_thinking and isinstance(thought, str) and thought:
                    yield message("assistant", f"[thinking] {thought}", stamp)
                else:
                    yield Skip("thinking", line)
            else:
                yield Skip("unknown_part", line, problem=True, detail="a content part of unknown type")

    def _system(self, record: dict[str, Any], stamp: object, line: int) -> Iterator[Any]:
        subtype = record.get("subtype")
        text = record.get("content") if isinstance(record.get("content"), str) else ""
        if subtype == "compact_boundary":
            meta = record.get("compactMetadata")
            trigger = meta.get("trigger") if isinstance(meta, dict) else None
            yield message(
                "system",
                f"[compaction] {text or 'Conversation compacted'}"
                + (f" (trigger: {trigger})" if isinstance(trigger, str) else ""),
                stamp,
            )
        elif record.get("level") == "error" and text:
            yield message("system", f"[error] {text}", stamp)
        elif subtype == "api_error":
            yield message("system", f"[error] {_api_error_text(record)}", stamp)
        else:
            yield Skip(f"system:{safe_name(subtype)}" if isinstance(subtype, str) else "system", line)


def _api_error_text(record: dict[str, Any]) -> str:
    """What a ``system`` ``api_error`` record (a failed API call being retried; it has no ``content``) says:
    the status and message of its ``error`` object, and the retry it announces."""
    error: dict[str, Any] = record["error"] if isinstance(record.get("error"), dict) else {}
    inner: dict[str, Any] = error["error"] if isinstance(error.get("error"), dict) else {}
    detail: dict[str, Any] = inner["error"] if isinstance(inner.get("error"), dict) else inner
    said = detail.get("message") if isinstance(detail.get("message"), str) else error.get("message")
    status = error.get("status")
    text = "API error" + (f" {status}" if isinstance(status, int) and not isinstance(status, bool) else "")
    if isinstance(said, str) and said:
        text += f": {said}"
    attempt, most = record.get("retryAttempt"), record.get("maxRetries")
    if isinstance(attempt, int) and isinstance(most, int):
        text += f" (retry {attempt} of {most})"
    return text
