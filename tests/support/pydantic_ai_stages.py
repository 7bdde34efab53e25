"""pydantic-ai function models that play the Observer, the Reflector and Dropper, and a coding agent.

No model runs here, so the pydantic-ai tests and benchmarks give ``FunctionModel`` these functions. The
pipeline reaches them through obsmem's pydantic-ai adapter, exactly as it would reach a provider's model.

- :func:`observer`: one observation per event it may cite, quoting the start of the event's text (so what a
  conversation said survives in memory), then "done" after the receipt.
- :func:`reflector`: one reflection per ten observations no reflection covers yet (keeping their code words
  and file names), and as the Dropper
  proposes every observation shown (obsmem's own ranking and cap decide what actually goes).
- :class:`CodingAgent`: a scripted agent turn: a prompt ``turn N: ...`` makes one ``run_tests`` call, its
  result makes a short answer; a prompt asking for a code word answers from whatever it was sent, so the
  answer shows whether the fact survived compaction. Every request it receives is recorded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from support.scripted_chat import citable_seqs, shown_observations

_HEADER = re.compile(r"^#(\d+) (\d{4}-\d\d-\d\d \d\d:\d\d) (.*)$")
CODE_WORD = re.compile(r"code word for turn (\d+) is (\w+)")


def _opening_text(messages: list[ModelMessage]) -> str:
    last = messages[-1]
    if isinstance(last, ModelRequest):
        return "\n".join(p.content for p in last.parts if isinstance(p, UserPromptPart) and isinstance(p.content, str))
    return ""


def _answered(messages: list[ModelMessage]) -> bool:
    last = messages[-1]
    return isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts)


def event_bodies(transcript: str) -> dict[int, tuple[str, str, str]]:
    """``seq -> (time, who, first line of the body)`` for every event of an Observer transcript."""
    events: dict[int, tuple[str, str, str]] = {}
    current: int | None = None
    for line in transcript.splitlines():
        header = _HEADER.match(line)
        if header:
            current = int(header.group(1))
            events[current] = (header.group(2), header.group(3), "")
        elif current is not None and line.strip() and not events[current][2]:
            when, who, _ = events[current]
            events[current] = (when, who, line.strip()[:300])
    return events


def observer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if _answered(messages):
        return ModelResponse(parts=[TextPart("done")])
    transcript = _opening_text(messages)
    bodies = event_bodies(transcript)
    items = []
    for seq in citable_seqs(transcript):
        when, who, body = bodies.get(seq, ("2026-05-01 10:00", "event", ""))
        items.append(
            {"content": f"{who}: {body or 'no text'}", "timestamp": when, "importance": "medium", "source_refs": [seq]}
        )
    if not items:
        return ModelResponse(parts=[TextPart("nothing to record")])
    return ModelResponse(parts=[ToolCallPart("record_observations", {"observations": items})])


def reflector(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if _answered(messages):
        return ModelResponse(parts=[TextPart("done")])
    tool = info.function_tools[0].name if info.function_tools else ""
    shown = shown_observations(_opening_text(messages))
    if tool == "drop_observations":
        return ModelResponse(parts=[ToolCallPart(tool, {"observation_ids": [o.id for o in shown]})])
    # Like a careful Reflector, condense what no reflection covers yet, ten observations at a time.
    fresh = [o for o in shown if o.coverage == "not covered"]
    groups = [fresh[i : i + 10] for i in range(0, len(fresh), 10)]
    items = [
        {"content": _condensed([o.content for o in group]), "supporting_observation_ids": [o.id for o in group]}
        for group in groups
    ]
    if not items:
        return ModelResponse(parts=[TextPart("nothing to reflect")])
    return ModelResponse(parts=[ToolCallPart("record_reflections", {"reflections": items})])


def _condensed(contents: list[str]) -> str:
    """What a reflection keeps of its observations: the code words and file names, else their openings."""
    facts = [f"code word for turn {turn} is {word}" for text in contents for turn, word in CODE_WORD.findall(text)]
    facts += [path for text in contents for path in re.findall(r"src/\w+\.py", text)]
    kept = sorted(set(facts)) or [text[:40] for text in contents]
    return ("Condensed: " + "; ".join(kept))[:400]


def observer_model(**profile: Any) -> FunctionModel:
    return FunctionModel(observer, model_name="scripted-observer", profile=profile or None)


def reflector_model(**profile: Any) -> FunctionModel:
    return FunctionModel(reflector, model_name="scripted-reflector", profile=profile or None)


def _texts(messages: list[ModelMessage]) -> list[str]:
    texts: list[str] = []
    for message in messages:
        for part in message.parts:
            content = getattr(part, "content", None)
            if isinstance(content, str):
                texts.append(content)
    return texts


@dataclass
class CodingAgent:
    """The agent's model: records every request it is sent (the messages as the model saw them)."""

    requests: list[list[ModelMessage]] = field(default_factory=list)
    output_padding: int = 0  # extra words in each tool result, to grow the conversation

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append(list(messages))
        if _answered(messages):
            last = messages[-1]
            result = next(p for p in last.parts if isinstance(p, ToolReturnPart))
            return ModelResponse(parts=[TextPart(f"Done with {result.tool_name}: {str(result.content)[:40]}")])
        prompt = _opening_text(messages)
        asked = re.search(r"what was the code word for turn (\d+)", prompt)
        if asked:
            turn = asked.group(1)
            for text in _texts(messages):
                for found_turn, word in CODE_WORD.findall(text):
                    if found_turn == turn:
                        return ModelResponse(parts=[TextPart(f"The code word for turn {turn} was {word}.")])
            return ModelResponse(parts=[TextPart("I do not know.")])
        turn = re.search(r"turn (\d+)", prompt)
        number = turn.group(1) if turn else "0"
        return ModelResponse(parts=[ToolCallPart("run_tests", {"path": f"src/module_{number}.py"})])

    def model(self, **profile: Any) -> FunctionModel:
        return FunctionModel(self, model_name="coding-agent", profile=profile or None)


def system_prompt_kept(messages: list[ModelMessage]) -> bool:
    return any(isinstance(p, SystemPromptPart) for m in messages if isinstance(m, ModelRequest) for p in m.parts)


def tool_pairs_intact(messages: list[ModelMessage]) -> bool:
    """Every tool return sent has its call earlier in the same request, and every call has its return
    (except the calls of the newest response, which are being answered)."""
    calls: set[str] = set()
    returned: set[str] = set()
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                calls.add(part.tool_call_id)
            elif isinstance(part, ToolReturnPart):
                if part.tool_call_id not in calls:
                    return False
                returned.add(part.tool_call_id)
    return calls == returned
