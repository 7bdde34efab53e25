"""The coding session both pydantic-ai benchmarks drive: one turn a module of the project, each with its code word."""

from __future__ import annotations

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage


async def module_turns(
    agent: Agent[None, str], history: list[ModelMessage], first: int, count: int
) -> list[ModelMessage]:
    """``count`` turns from turn ``first``, each resumed with the history so far; the history after them."""
    for turn in range(first, first + count):
        prompt = f"turn {turn}: fix the failing test in src/module_{turn}.py; the code word for turn {turn} is w{turn}"
        history = (await agent.run(prompt, message_history=history)).all_messages()
    return history
