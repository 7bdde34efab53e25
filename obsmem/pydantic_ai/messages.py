"""pydantic-ai messages as obsmem events, each with a stable seq: the identity that makes appends idempotent.

Every part of a run's message history that says something becomes one event, numbered in order from 1:
system prompts, user prompts, assistant text, tool calls (with their arguments), tool returns and retry
prompts. Thinking, files and provider-native tool parts are not conversation the Observer can use, and
take no number. The numbering depends only on the history, so the same history always yields the same
``(seq, event)`` pairs: a run resumed with ``message_history`` (in this process or another) re-derives the
seqs it appended before, and obsmem's append answers an identical event at a used seq as a duplicate and a
different one as a conflict. Nothing is appended twice, and a history that changed is refused, not mixed.

Every event is one obsmem takes: an event it refused would stop the session's appends at it for good, so
what a message holds beyond an event's rules is stored in a form that keeps to them (:func:`_storable`).
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from obsmem.events import MAX_EVENT_CONTENT, MAX_TOOL_FIELD
from obsmem.json_shape import json_shape_problem
from obsmem.pipeline import estimate_tokens
from obsmem.redaction import redacted_prefix
from obsmem.validation import replace_lone_surrogates


@dataclass(frozen=True)
class MessageSpan:
    """The events one message became: seqs ``first..last`` (``first > last``: none) and their tokens."""

    first: int
    last: int
    tokens: int


@dataclass
class EventLedger:
    """The events of one history, derived incrementally as the history grows.

    ``spans[i]`` belongs to ``messages[i]``. The ledger remembers the message objects it numbered, so a
    model request of the same run only converts the messages added since the last one; a history that is
    not an extension of the one seen (another run's) is numbered again from the start.
    """

    events: list[dict[str, Any]] = field(default_factory=list)
    spans: list[MessageSpan] = field(default_factory=list)
    # Running sums, so a request on a long history costs O(log n) to cut and measure, not O(n):
    # lasts[i] is spans[i].last (never decreasing); prefix[i] is the tokens of messages[:i].
    lasts: list[int] = field(default_factory=list)
    prefix: list[int] = field(default_factory=lambda: [0])
    system_messages: list[int] = field(default_factory=list)  # indices of messages with a system prompt
    resets: int = 0  # times a history that did not extend the one seen was numbered from the start
    _messages: list[ModelMessage] = field(default_factory=list)

    def update(self, messages: list[ModelMessage]) -> None:
        seen = len(self._messages)
        if seen > len(messages) or any(not _same(messages[i], self._messages[i]) for i in _probes(seen)):
            self.resets += 1
            self.events.clear()
            self.spans.clear()
            self.lasts.clear()
            self.system_messages.clear()
            del self.prefix[1:]
            self._messages.clear()
            seen = 0
        for message in messages[seen:]:
            converted = message_events(message)
            first = len(self.events) + 1
            for event in converted:
                event["seq"] = len(self.events) + 1
                self.events.append(event)
            span = MessageSpan(first, len(self.events), sum(_event_tokens(e) for e in converted))
            self.spans.append(span)
            self.lasts.append(span.last)
            self.prefix.append(self.prefix[-1] + span.tokens)
            if isinstance(message, ModelRequest) and any(isinstance(p, SystemPromptPart) for p in message.parts):
                self.system_messages.append(len(self._messages))
            self._messages.append(message)

    def messages_through(self, seq: int) -> int:
        """How many leading messages hold only events up to ``seq``."""
        return bisect.bisect_right(self.lasts, seq)

    def tokens(self, start: int = 0, end: int | None = None) -> int:
        """Estimated tokens of ``messages[start:end]``."""
        return self.prefix[len(self.spans) if end is None else end] - self.prefix[start]

    @property
    def last_seq(self) -> int:
        return len(self.events)


def _same(one: ModelMessage, other: ModelMessage) -> bool:
    return one is other or one == other


def _probes(seen: int) -> tuple[int, ...]:
    """Which earlier messages to compare by identity: the last one and the first, enough to tell runs apart
    (a history is only ever extended within a run)."""
    return tuple({0, seen - 1}) if seen else ()


def message_events(message: ModelMessage) -> list[dict[str, Any]]:
    """The events one message becomes (without seqs), in part order."""
    events = _events(message)
    for event in events:
        if event.get("created_at") is None:
            event.pop("created_at", None)
        _storable(event)
    return events


def _storable(event: dict[str, Any]) -> None:
    """Fit ``event`` to what obsmem takes, in place: lone surrogates (a file read with ``surrogateescape``,
    a ``\\ud800`` escape a model wrote) become U+FFFD, content past the most an event holds is cut, saying
    how much was left out, tool arguments past it too (as their JSON text: what is left of cut JSON is not
    JSON), and a tool name or call id past 256 characters is cut to them. The same message always becomes
    the same event, so a resumed run still finds its appends as duplicates."""
    content = event.get("content")
    if isinstance(content, str):
        event["content"] = _cut(replace_lone_surrogates(content), MAX_EVENT_CONTENT)
    for name in ("tool_name", "tool_call_id"):
        value = event.get(name)
        if isinstance(value, str):
            event[name] = replace_lone_surrogates(value)[:MAX_TOOL_FIELD]
    args = event.get("tool_args")
    if isinstance(args, str):
        event["tool_args"] = _cut(replace_lone_surrogates(args), MAX_EVENT_CONTENT)
    elif args is not None:
        # Arguments are not bounded like content, but a request body is (the server's max_body_bytes, 8 MiB by
        # default): a call writing a large file was refused at every retry, and the session's appends after
        # it with it, for good.
        text = _json_text(args)
        if text is not None and len(text) > MAX_EVENT_CONTENT:
            event["tool_args"] = _cut(text, MAX_EVENT_CONTENT)


def _json_text(value: Any) -> str | None:
    """``value`` as compact JSON text, or None when it is not JSON (refused when appended, saying why)."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (ValueError, TypeError, RecursionError):
        return None


def _cut(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending with how much was left out (never silent). What
    is kept is redacted with what follows the cut in view: cut first, a secret the cut splits would reach
    obsmem as a fragment its redaction does not recognise."""
    if len(text) <= limit:
        return text
    keep = limit - 160  # room for the note below, whatever the numbers in it, and for a marker the cut ends in
    return f"{redacted_prefix(text, keep)}\n[cut: {len(text) - keep} of {len(text)} characters not stored]"


def arguments_cut(event: dict[str, Any]) -> bool:
    """Whether :func:`_storable` cut ``event``'s tool arguments (longer than an event's content may be):
    releases before it stored such arguments whole, so a stored copy of the event may hold them uncut."""
    args = event.get("tool_args")
    return isinstance(args, str) and args.endswith(" characters not stored]") and "\n[cut: " in args[-80:]


# Room kept for the note a cut ends with, in bytes of JSON.
_CUT_NOTE_BYTES = 80
# Characters measured at a time when looking for how much of a text fits a number of bytes.
_MEASURE_CHARS = 4096


def fit_event(event: dict[str, Any], budget: int) -> dict[str, Any]:
    """``event``, or a copy cut so that its JSON (as httpx posts it) holds at most ``budget`` bytes: a request
    body over the server's limit is refused at every retry, and nothing of the session after it would ever
    be stored. Characters that JSON escapes (control characters: six bytes each) and UTF-8's longer ones
    make 2,000,000 characters, the most an event holds, up to 12 MB; tool arguments have no length limit. The
    tool arguments, when they are over half of ``budget``, become their JSON text cut to that half; then the
    content is cut to what is left. A cut text ends with ``[cut: N of M characters not stored]``, its kept
    part redacted with what follows the cut in view, as :func:`_cut` does. The same event always becomes the
    same cut event, so a resent append still finds it as a duplicate. ``budget`` must leave room for the
    other fields (16 KiB always does)."""
    if event_bytes(event) <= budget:
        return event
    event = dict(event)
    args = event.get("tool_args")
    if args is not None:
        text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, separators=(",", ":"))
        if _escaped_bytes(text) > budget // 2:
            event["tool_args"] = _cut_to_bytes(text, budget // 2)
    content = event.get("content")
    if isinstance(content, str) and event_bytes(event) > budget:
        room = budget - event_bytes(event | {"content": ""})
        event["content"] = _cut_to_bytes(content, room)
    return event


def event_bytes(event: dict[str, Any]) -> int:
    """The bytes of ``event``'s JSON in a request body, as httpx writes it, and its separating comma."""
    return len(json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace")) + 1


def _escaped_bytes(text: str) -> int:
    """The bytes of ``text`` inside a JSON string (as httpx writes it: UTF-8, control characters escaped)."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "replace")) - 2


def _cut_to_bytes(text: str, budget: int) -> str:
    """``text`` cut so that it takes at most ``budget`` bytes in a JSON string, ending with how much was left
    out; the kept part redacted with what follows the cut in view."""
    limit = max(0, budget - _CUT_NOTE_BYTES)
    keep = _chars_within(text, limit)
    kept = redacted_prefix(text, keep)
    while keep > 0 and _escaped_bytes(kept) > limit:  # redaction's markers can be longer than what they hide
        keep = max(0, keep - max(1, _escaped_bytes(kept) - limit))
        kept = redacted_prefix(text, keep)
    return f"{kept}\n[cut: {len(text) - keep} of {len(text)} characters not stored]"


def _chars_within(text: str, budget: int) -> int:
    """How many leading characters of ``text`` take at most ``budget`` bytes in a JSON string (each character
    is escaped on its own, so the sizes of consecutive pieces add up)."""
    size = 0
    for start in range(0, len(text), _MEASURE_CHARS):
        piece = text[start : start + _MEASURE_CHARS]
        cost = _escaped_bytes(piece)
        if size + cost > budget:
            low, high = 0, len(piece)
            while low < high:
                middle = (low + high + 1) // 2
                if size + _escaped_bytes(piece[:middle]) <= budget:
                    low = middle
                else:
                    high = middle - 1
            return start + low
        size += cost
    return len(text)


def _storable_json(value: Any) -> bool:
    """Whether obsmem stores ``value`` as tool arguments: not too deep, every number finite, every string
    encodable as UTF-8."""
    if json_shape_problem(value) is not None:
        return False
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (UnicodeEncodeError, ValueError, TypeError, RecursionError):
        return False
    return True


def _events(message: ModelMessage) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    if isinstance(message, ModelRequest):
        for part in message.parts:
            stamp = _iso(getattr(part, "timestamp", None) or message.timestamp)
            if isinstance(part, SystemPromptPart):
                events.append({"role": "system", "content": part.content, "created_at": stamp})
            elif isinstance(part, UserPromptPart):
                events.append({"role": "user", "content": user_text(part), "created_at": stamp})
            elif isinstance(part, ToolReturnPart):
                outcome = getattr(part, "outcome", "success")
                prefix = "" if outcome == "success" else f"[{outcome}] "
                events.append(
                    {
                        "role": "tool",
                        "type": "tool_result",
                        "content": prefix + _tool_text(part.content),
                        "tool_name": part.tool_name,
                        "tool_call_id": part.tool_call_id,
                        "created_at": stamp,
                    }
                )
            elif isinstance(part, RetryPromptPart):
                events.append(_retry_event(part, stamp))
            elif isinstance(part, RetryFeedbackPart):  # a retry of the final answer: the framework speaking
                text = part.content if isinstance(part.content, str) else _tool_text(part.content)
                events.append({"role": "system", "content": f"retry requested: {text}", "created_at": stamp})
    elif isinstance(message, ModelResponse):
        stamp = _iso(message.timestamp)
        for answer in message.parts:
            if isinstance(answer, TextPart):
                events.append({"role": "assistant", "content": answer.content, "created_at": stamp})
            elif isinstance(answer, ToolCallPart):
                events.append(
                    {
                        "role": "assistant",
                        "type": "tool_call",
                        "tool_name": answer.tool_name,
                        "tool_args": _arguments(answer.args),
                        "tool_call_id": answer.tool_call_id,
                        "created_at": stamp,
                    }
                )
    return events


def _retry_event(part: RetryPromptPart, stamp: str | None) -> dict[str, Any]:
    text = part.content if isinstance(part.content, str) else _tool_text(part.content)
    if part.tool_name:
        return {
            "role": "tool",
            "type": "tool_result",
            "content": f"retry requested: {text}",
            "tool_name": part.tool_name,
            "tool_call_id": part.tool_call_id,
            "created_at": stamp,
        }
    # A retry of the final answer is the framework talking to the model, not the user.
    return {"role": "system", "content": f"retry requested: {text}", "created_at": stamp}


def user_text(part: UserPromptPart) -> str:
    """A user prompt's text (non-text items named by their type)."""
    if isinstance(part.content, str):
        return part.content
    pieces = [item if isinstance(item, str) else f"[{type(item).__name__}]" for item in part.content]
    return "\n".join(pieces)


def _tool_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    try:
        return json.dumps(content, ensure_ascii=False, default=str, sort_keys=True)
    except (TypeError, ValueError):
        return str(content)


def _arguments(args: object) -> dict[str, Any] | list[Any] | str | None:
    if isinstance(args, str):
        try:
            parsed = json.loads(args)
        except (ValueError, RecursionError):
            return args
        # Kept as the model wrote them when obsmem would refuse the parsed value (too deep, NaN, a lone
        # surrogate): an event refused here would stop the session's appends at it, where the text is stored.
        if not isinstance(parsed, dict | list) or not _storable_json(parsed):
            return args
        return parsed
    if args is None:
        return None
    # Typed arguments of pydantic-ai's own tools (tool search, capability loading) are dataclasses or models.
    dump = getattr(args, "model_dump", None)
    value = args if isinstance(args, dict) else dump(mode="json") if callable(dump) else _loose_json(args)
    if _storable_json(value):
        return value
    # A provider's parsed arguments obsmem would refuse (a NaN, a lone surrogate): stored as their text.
    return _loose_json(value, as_text=True)


def _loose_json(value: Any, *, as_text: bool = False) -> Any:
    """``value`` written as JSON with anything JSON lacks as its ``str`` (and NaN as ``NaN``); parsed back
    unless ``as_text``. A value too deep to write is named, not stored."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):
        return "[arguments too deeply nested to store]"
    return text if as_text else json.loads(text)


def _iso(stamp: datetime | None) -> str | None:
    return stamp.isoformat() if stamp is not None else None


def _event_tokens(event: dict[str, Any]) -> int:
    tokens = estimate_tokens(event.get("content") or "")
    if event.get("tool_args") is not None:
        tokens += estimate_tokens(json.dumps(event["tool_args"], ensure_ascii=False, default=str))
    if event.get("tool_name"):
        tokens += estimate_tokens(str(event["tool_name"]))
    return tokens
