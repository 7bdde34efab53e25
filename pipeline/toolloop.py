"""The conversation every model stage has: call the one tool, get a receipt, correct, stop.

Each stage (Observer, Reflector, Dropper) gives the model one tool and answers every call with a receipt
it can act on. The conversation goes on for at most ``max_rounds`` model replies; it ends early when the
model answers without a tool call, or when it keeps sending calls identical to earlier ones (a repetition
loop); a first reply cut off at the model's output limit before any call fails the stage instead, and so
does any reply the endpoint's content filter withheld. Only the first ``MAX_CALLS_PER_REPLY`` calls of a
reply are read (and kept in the conversation); the last one read tells the model. The last round's reply,
which no request follows, has all its calls read. Calls to another tool
name get an error result naming the right one. What a call's receipt says is the stage's
:class:`~obsmem.pipeline.receipts.ReceiptCheck`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from obsmem.errors import ModelBadResponse, ModelRefused
from obsmem.pipeline.llm import ChatModel

REPEATED_CALLS_TO_STOP = 2
# A stage has one tool, and one call carries hundreds of items; a model that sends hundreds of calls in one
# reply is degenerate. Every call read is answered with a receipt in the next request, so reading them all
# grew it past any context window (1,500 one-item calls: 0.7 MB), which the endpoint refused on every retry
# and the chunk was never observed. The calls beyond are left out of the conversation, unanswered.
MAX_CALLS_PER_REPLY = 10


@dataclass
class LoopResult:
    rounds: int
    stop_reason: str  # "done" | "rounds_exhausted" | "repetition"
    prompt_tokens: int = 0
    completion_tokens: int = 0


def run_tool_loop(
    client: ChatModel,
    messages: list[dict[str, Any]],
    tool: dict[str, Any],
    handle_call: Callable[[str], dict[str, Any]],
    *,
    max_rounds: int,
) -> LoopResult:
    """Talk to the model until it is done; ``handle_call(arguments)`` returns the receipt of one call."""
    name = tool["function"]["name"]
    seen_calls: set[str] = set()
    repeats = 0
    prompt_tokens = completion_tokens = 0
    stop_reason = "rounds_exhausted"
    rounds = 0
    for rounds in range(1, max_rounds + 1):  # noqa: B007 - the count is reported
        reply = client.complete(messages, tools=[tool], tool_choice="auto")
        prompt_tokens += reply.prompt_tokens or 0
        completion_tokens += reply.completion_tokens or 0
        if reply.finish_reason == "content_filter":
            # The endpoint withheld (or cut) the reply: not an answer that nothing is worth keeping, and what
            # it did hold may be a part. Ending as done would cover the chunk (or mark the pool reflected on)
            # with what little came before, for good; failing keeps the events for the retries.
            raise ModelRefused(
                f"the model endpoint's content filter withheld the model's reply (round {rounds} of {name})"
            )
        if not reply.tool_calls:
            if rounds == 1 and reply.finish_reason == "length":
                # Stopped by the output limit before any call: not an answer that nothing is worth keeping,
                # which would cover the chunk (or mark the pool reflected on) with nothing, for good.
                raise ModelBadResponse(f"the model's reply was cut off at its output limit before it called {name}")
            stop_reason = "done"
            break
        # No request follows the last round (nothing for the conversation to outgrow), and what it leaves
        # unread is lost for good: the chunk is covered after it. Its calls are all read.
        calls = reply.tool_calls if rounds == max_rounds else reply.tool_calls[:MAX_CALLS_PER_REPLY]
        messages.append(dataclasses.replace(reply, tool_calls=calls).as_message())
        for call in calls:
            if call.name != name:
                result: dict[str, Any] = {"error": f"there is no tool named {call.name!r}; use {name}"}
            else:
                fingerprint = _normalised(call.arguments)
                if fingerprint in seen_calls:
                    repeats += 1
                    result = {
                        "error": "this call is identical to an earlier one; nothing new was recorded. "
                        "Reply without a tool call if you are done."
                    }
                else:
                    seen_calls.add(fingerprint)
                    result = handle_call(call.arguments)
            if call is calls[-1] and len(reply.tool_calls) > len(calls):
                result["unread_calls"] = (
                    f"this reply held {len(reply.tool_calls)} tool calls; only the first {len(calls)} of a reply "
                    "are read: send what the others held in one call"
                )
            content = json.dumps(result, ensure_ascii=False)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        if repeats >= REPEATED_CALLS_TO_STOP:
            stop_reason = "repetition"
            break
    return LoopResult(rounds, stop_reason, prompt_tokens, completion_tokens)


def _normalised(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, separators=(",", ":"))
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser follows
        return arguments.strip()
