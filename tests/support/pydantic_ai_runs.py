"""Helpers the pydantic-ai tests share: the scripted coding agent's runs and what the store holds."""

from __future__ import annotations

import json
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolCallPart, UserPromptPart

from obsmem.app import Obsmem
from obsmem.pipeline import estimate_tokens
from obsmem.pydantic_ai import ObservationalMemory, OMEvent
from obsmem.pydantic_ai.messages import message_events
from support.pydantic_ai_session import agent_with_memory
from support.pydantic_ai_stages import CodingAgent

WINDOW = 8_000


def stored_events(memory: Obsmem, project: str = "p", session: str = "s1") -> list[tuple[Any, ...]]:
    with memory.database(project).read() as conn:
        return conn.execute(
            "SELECT seq, role, type, content, tool_name, tool_call_id FROM events WHERE session_id = ? ORDER BY seq",
            (session,),
        ).fetchall()


def history_events(history: list[ModelMessage]) -> list[tuple[Any, ...]]:
    events = [event for message in history for event in message_events(message)]
    return [
        (seq, e["role"], e.get("type", "message"), e.get("content", ""), e.get("tool_name"), e.get("tool_call_id"))
        for seq, e in enumerate(events, start=1)
    ]


def request_tokens(messages: list[ModelMessage]) -> int:
    total = 0
    for message in messages:
        for part in message.parts:
            content = getattr(part, "content", None)
            total += estimate_tokens(content if isinstance(content, str) else json.dumps(content, default=str))
            if isinstance(part, ToolCallPart):
                total += estimate_tokens(part.args_as_json_str())
    return total


def memory_in(messages: list[ModelMessage]) -> bool:
    return any(
        isinstance(p, UserPromptPart) and isinstance(p.content, str) and "<obsmem-memory" in p.content
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
    )


def session_memory(memory: Obsmem, events: list[OMEvent], **options: Any) -> ObservationalMemory:
    """The capability over session "s1" of project "p", every event it emits collected in ``events``."""
    return ObservationalMemory(memory, project="p", session_id="s1", event_handler=events.append, **options)


def logging_agent(om: ObservationalMemory, model: CodingAgent, log_lines: int) -> Agent[None, str]:
    """An agent whose run_tests tool returns ``log_lines`` log lines, to fill a small context window on purpose."""
    agent = Agent(model.model(), capabilities=[om])

    @agent.tool_plain
    def run_tests(path: str) -> str:
        return "log line " * log_lines

    return agent


def coding_agent(om: ObservationalMemory, model: CodingAgent) -> Agent[None, str]:
    return agent_with_memory(om, model.model())


async def run_turns(
    agent: Agent[None, str], om: ObservationalMemory, turns: range, history: list[ModelMessage], wait: float = 30
) -> list[ModelMessage]:
    """Turns of the coding agent, each resumed with the history so far and observed before the next."""
    for turn in turns:
        prompt = f"turn {turn}: fix the failing test; the code word for turn {turn} is word{turn}"
        result = await agent.run(prompt, message_history=history)
        history = result.all_messages()
        await om.flush(wait)
    return history
