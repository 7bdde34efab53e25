"""Compaction: the messages obsmem has observed, replaced by one message carrying the projection.

The cut is exact: the projection reports ``observed_through_seq``, read in the same snapshot as the memory
it renders, and only messages whose every event is at or below it are replaced. Then it is moved back until
it is safe:

- never between a tool call and its return (a request that starts the kept tail with tool returns, or
  retry prompts for tool calls, takes the response that made the calls with it);
- the kept tail starts with a model response, or the replacement joins the request the tail starts with,
  so requests and responses still alternate for providers that insist on it;
- the request being sent now (the last message) is always kept.

The replacement keeps every system prompt part of what it replaces, then the projection under a line that
says which messages and events it stands for, then the run's current user prompt if the cut passed it: the
model never loses its instructions or the question it is answering. Nothing is changed in the run's
history: only the request going to the model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    ToolReturnPart,
    UserPromptPart,
)

from obsmem.pipeline import estimate_tokens
from obsmem.pydantic_ai.backends import ProjectionView
from obsmem.pydantic_ai.messages import EventLedger, user_text

EMPTY_MEMORY = "(obsmem observed these messages and kept nothing from them worth remembering.)"


@dataclass(frozen=True)
class Compaction:
    """The request's messages after compaction, and what was replaced."""

    messages: list[ModelMessage]
    replaced_messages: int  # leading messages of the history replaced (0: nothing)
    replaced_through_seq: int  # the last event seq they hold
    replaced_tokens: int  # their estimated tokens
    request_tokens: int  # estimated tokens of the messages sent: the replacement (all it carries) + kept tail


def safe_cut(messages: list[ModelMessage], ledger: EventLedger, observed_through_seq: int) -> int:
    """How many leading messages may be replaced: all observed, and a cut that splits nothing."""
    cut = min(ledger.messages_through(observed_through_seq), len(messages) - 1)  # the request sent stays
    while cut > 0 and not _starts_cleanly(messages[cut]):
        cut -= 1
    return cut


def _starts_cleanly(message: ModelMessage) -> bool:
    """Whether a kept tail may start here: a response, or a request answering no earlier tool call."""
    if isinstance(message, ModelResponse):
        return True
    return not any(
        isinstance(part, ToolReturnPart) or (isinstance(part, RetryPromptPart) and part.tool_name)
        for part in message.parts
    )


def compact(messages: list[ModelMessage], ledger: EventLedger, projection: ProjectionView) -> Compaction:
    """Replace the observed head of ``messages`` (the run's history, numbered by ``ledger``)."""
    cut = safe_cut(messages, ledger, projection.observed_through_seq)
    if cut == 0:
        return Compaction(list(messages), 0, 0, 0, ledger.tokens())
    through = ledger.lasts[cut - 1]
    replaced_tokens = ledger.tokens(0, cut)
    parts: list[ModelRequestPart] = [
        part
        for index in ledger.system_messages
        if index < cut
        for part in messages[index].parts
        if isinstance(part, SystemPromptPart)
    ]
    note = (
        f"[obsmem: the first {cut} messages of this conversation (events #1-#{through}) were replaced by the "
        "observational memory below; the messages after it follow verbatim.]"
    )
    # What the replacement carries back counts as sent: the system prompt parts and the current prompt.
    carried = sum(estimate_tokens(str(part.content)) for part in parts)
    parts.append(UserPromptPart(content=f"{note}\n{projection.text or EMPTY_MEMORY}"))
    current = _current_prompt(messages)
    if current is not None and current[0] < cut:
        parts.append(current[1])
        carried += estimate_tokens(user_text(current[1]))
    tail = list(messages[cut:])
    first = tail[0]
    if isinstance(first, ModelRequest):
        tail[0] = dataclasses.replace(first, parts=[*parts, *first.parts])
    else:
        tail.insert(0, ModelRequest(parts=parts))
    request_tokens = ledger.tokens(cut) + carried + estimate_tokens(note) + projection.tokens
    return Compaction(tail, cut, through, replaced_tokens, request_tokens)


def _current_prompt(messages: list[ModelMessage]) -> tuple[int, UserPromptPart] | None:
    """The newest user prompt and the index of its message."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, ModelRequest):
            for part in reversed(message.parts):
                if isinstance(part, UserPromptPart):
                    return index, part
    return None
