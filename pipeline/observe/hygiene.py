"""What the Observer is shown of each event: the conversation, and nothing that only looks like it.

The failures this prevents, seen in other observational-memory systems: an Observer that records the
agent's (or its own) instructions as facts the user stated, that re-observes memory the service itself
injected, and that sees a tool's result without the arguments that produced it. So:

- **System messages are never shown.** They are the agent's instructions, not conversation; the event is
  still covered (listed as omitted) but cannot be cited.
- **Injected memory is cut out**: anything inside ``<obsmem-memory>`` tags (the projection wraps itself
  in them), or from the projection's header line to the end of the message when an agent dropped the
  tags, and the results of obsmem's own memory tools (``memory_search``, ``recall``).
- **System reminders are cut out**: blocks in the configured tags (default ``<system-reminder>``).
- **Tool calls show their arguments** (JSON) beside the tool name; results name the tool they answer,
  and show the arguments too when the event carries them (a call and its result logged as one event).
- **Secrets are redacted** again here, in case a row predates a redaction pattern.

Each cut leaves a short marker so the model knows something was there without seeing it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from obsmem.framing import escape_framing_tags
from obsmem.redaction import redact_text

MEMORY_TAG = "obsmem-memory"
# The first line of every rendered projection; see projection.py (kept in one place).
PROJECTION_HEADER = "Observational memory (obsmem):"
DEFAULT_OMIT_TAGS: tuple[str, ...] = ("system-reminder",)
DEFAULT_MEMORY_TOOLS: tuple[str, ...] = ("memory_search", "recall")
# The agent's note tool: a note earns trust through the judge and a groom pass (docs/trust.md). Were the
# Observer shown the note, it could record it as an observation and so skip that judgment.
DEFAULT_NOTE_TOOLS: tuple[str, ...] = ("memory",)
NOTE_OMITTED = "(omitted: a note the agent wrote; notes earn trust through judgment, not observation)"


@dataclass(frozen=True)
class EventView:
    """One event as the Observer sees it."""

    seq: int
    header: str  # "#12 2026-05-01 10:32 user"
    body: str  # cleaned, redacted text; offsets of oversized parts index into it
    citable: bool  # False for events shown only as omitted (system messages)
    source_tokens: int  # the event's raw token estimate (what it added to the backlog)
    when: str  # "2026-05-01 10:32": the event's time as the header shows it (UTC, to the minute)


@lru_cache(maxsize=32)
def _tag_pattern(tag: str) -> re.Pattern[str]:
    name = re.escape(tag)
    # A closed block, or an opening tag with no close (cut to the end of the text).
    return re.compile(rf"<{name}(?:\s[^>]*)?>.*?(?:</{name}\s*>|\Z)", re.DOTALL | re.IGNORECASE)


_HEADER_TO_END = re.compile(re.escape(PROJECTION_HEADER) + r".*?(?:</" + MEMORY_TAG + r"\s*>|\Z)", re.DOTALL)


def clean_text(text: str, omit_tags: Sequence[str] = DEFAULT_OMIT_TAGS) -> str:
    """Cut injected memory and system reminders; redact secrets."""
    if not text:
        return text
    text = _tag_pattern(MEMORY_TAG).sub("[obsmem memory omitted]", text)
    text = _HEADER_TO_END.sub("[obsmem memory omitted]", text)
    for tag in omit_tags:
        text = _tag_pattern(tag).sub(f"[{tag} omitted]", text)
    return escape_framing_tags(redact_text(text)).strip()


def display_time(created_at: str) -> str:
    """Stored ISO time ``2026-05-01T10:32:07.123Z`` -> ``2026-05-01 10:32`` (UTC)."""
    return created_at[:10] + " " + created_at[11:16]


def render_event(
    seq: int,
    role: str,
    type_: str,
    content: str,
    tool_name: str | None,
    tool_args: str | None,
    created_at: str,
    source_tokens: int,
    *,
    omit_tags: Sequence[str] = DEFAULT_OMIT_TAGS,
    memory_tools: Sequence[str] = DEFAULT_MEMORY_TOOLS,
    note_tools: Sequence[str] = DEFAULT_NOTE_TOOLS,
) -> EventView:
    when = display_time(created_at)
    if role == "system":
        return EventView(
            seq,
            f"#{seq} {when} system message",
            "(omitted: instructions, not conversation)",
            False,
            source_tokens,
            when,
        )
    tool = redact_text(tool_name) if tool_name else "unknown tool"
    if _names_one_of(tool_name, note_tools) and type_ in ("tool_call", "tool_result"):
        action = "called tool" if type_ == "tool_call" else "result of tool"
        header = f"#{seq} {when} {role} {action} {tool}" if type_ == "tool_call" else f"#{seq} {when} {action} {tool}"
        return EventView(seq, header, NOTE_OMITTED, True, source_tokens, when)
    if type_ == "tool_call":
        parts = [f"arguments: {_arguments(tool_args)}"]
        text = clean_text(content, omit_tags)
        if text:
            parts.append(text)
        return EventView(seq, f"#{seq} {when} {role} called tool {tool}", "\n".join(parts), True, source_tokens, when)
    if type_ == "tool_result":
        if _names_one_of(tool_name, memory_tools):
            body = "(omitted: obsmem's own memory tool result, already in memory)"
        else:
            body = clean_text(content, omit_tags) or "(empty result)"
            if tool_args is not None:
                # Agents that log a call and its result as one event put the arguments here: a result
                # read without them is the failure this module exists to prevent.
                body = f"arguments: {_arguments(tool_args)}\n{body}"
        return EventView(seq, f"#{seq} {when} result of tool {tool}", body, True, source_tokens, when)
    body = clean_text(content, omit_tags) or "(empty message)"
    return EventView(seq, f"#{seq} {when} {role}", body, True, source_tokens, when)


def _names_one_of(tool_name: str | None, names: Sequence[str]) -> bool:
    """Whether ``tool_name`` is one of ``names``, as it is called or qualified by the MCP server an agent
    reached it through: Claude Code names an MCP tool ``mcp__<server>__<tool>``, Codex (and Gemini CLI
    on a clash) ``<server>__<tool>``. Without this an agent on obsmem's MCP server had its notes shown to
    the Observer."""
    if not tool_name:
        return False
    if tool_name in names:
        return True
    server, qualified, tool = tool_name.rpartition("__")
    return bool(server and qualified) and tool in names


def _arguments(tool_args: str | None) -> str:
    if tool_args is None:
        return "(none)"
    try:
        value = json.loads(tool_args)
    except ValueError:
        return redact_text(tool_args)
    return redact_text(json.dumps(value, ensure_ascii=False, separators=(", ", ": ")))
