"""A scripted 200-turn coding session with a 16k-token window: does every request fit, and how much does
the memory replace?

An embedded Obsmem in a temporary directory, the capability with ``context_window=16_000`` (observe at
4,800 unobserved tokens, reflect at 6,400 memory tokens), and a coding agent whose every turn is a prompt,
a tool call, a tool result of 150-900 tokens (varying, seeded) and an answer: ~100k tokens over the
session, six times the window. The agent's model answers after ``--model-delay`` seconds, as a model
would; the Observer, Reflector and Dropper are pydantic-ai function models that answer at once (one
observation per event, reflections keeping code words and file names). Nothing waits for observation
between turns: the pipeline keeps up in the background, and the capability's last resort steps in when
it does not.

Measured over every model request, on what the agent's model actually receives: its estimated size
(every message part, the memory and the system prompt included, instructions and tool definitions)
against the window (the capability's own estimate of the same requests is reported beside it); how many
observed messages (every event at or below the projection's watermark) the memory replaced; the
last-resort waits and ``om_overflow`` events. At the end: whether the agent still answers a question
about turn 3 from memory.

Targets: no request over the window; the projection replaces >= 80% of the observed messages. Prints JSON.

    python benchmarks/pydantic_ai_session.py --turns 200 --window 16000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from pydantic_ai.messages import ModelMessage, ModelResponse  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai_turns import module_turns  # noqa: E402

from obsmem.app import Obsmem  # noqa: E402
from obsmem.pipeline import estimate_tokens  # noqa: E402
from obsmem.pydantic_ai import ObservationalMemory, OMEvent  # noqa: E402
from obsmem.settings import load_settings  # noqa: E402
from support.pydantic_ai_runs import request_tokens  # noqa: E402
from support.pydantic_ai_session import agent_with_memory, staged_memory  # noqa: E402
from support.pydantic_ai_stages import CodingAgent  # noqa: E402

WORDS = [
    "the",
    "login",
    "test",
    "fails",
    "with",
    "AuthExpired",
    "in",
    "src/auth/session.py",
    "after",
    "the",
    "token",
    "refresh",
    "retries",
]


def settings(window: int) -> dict[str, Any]:
    """The server side sized for the window: observe early, keep the pool under the reflection threshold."""
    return {
        "observer": {"buffer_tokens": window // 16},
        "jobs": {"poll_seconds": 0.02, "retry_backoff_seconds": 0.05},
        "reflector": {"reflect_after_observation_tokens": int(window * 0.3)},
        "pools": {"observations_max_tokens": int(window * 0.2)},
    }


class Session:
    """The agent side: the scripted model (with its delay) and the tool whose output grows the context."""

    def __init__(self, delay: float, seed: int) -> None:
        self.agent = CodingAgent()
        self.delay = delay
        self.random = random.Random(seed)
        self.sent: list[int] = []  # the estimated size of every request the model received

    async def model(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.sent.append(sent_tokens(messages, info))
        await asyncio.sleep(self.delay)
        return self.agent(messages, info)

    def run_tests(self, path: str) -> str:
        words = self.random.randint(120, 700)
        return f"ran the tests of {path}: " + " ".join(self.random.choice(WORDS) for _ in range(words))


def sent_tokens(messages: list[ModelMessage], info: AgentInfo) -> int:
    """The estimated size of a request as the model receives it: every message part (system prompts, the
    memory, the current prompt, the kept tail) plus the instructions and tool definitions."""
    tools = [*info.function_tools, *info.output_tools]
    schemas = [json.dumps(tool.parameters_json_schema, separators=(",", ":")) for tool in tools]
    return (
        request_tokens(messages)
        + estimate_tokens(info.instructions or "")
        + sum(estimate_tokens(tool.name) + estimate_tokens(tool.description or "") for tool in tools)
        + sum(estimate_tokens(schema) for schema in schemas)
    )


class CountingMemory(ObservationalMemory):
    """The capability, counting per request the observed messages and those the memory replaced."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.observed_messages = 0
        self.replaced_messages = 0

    async def before_model_request(self, ctx: Any, request_context: Any) -> Any:
        result = await super().before_model_request(ctx, request_context)
        compaction, projection = self.last_compaction, self.last_projection
        assert compaction is not None and projection is not None
        self.observed_messages += self.ledger.messages_through(projection.observed_through_seq)
        self.replaced_messages += compaction.replaced_messages
        return result


async def measure(turns: int, window: int, delay: float, seed: int) -> dict[str, Any]:
    events: list[OMEvent] = []
    with (
        tempfile.TemporaryDirectory() as data,
        Obsmem(load_settings(data_dir=Path(data), **settings(window))) as memory,
    ):
        om = staged_memory(
            memory,
            CountingMemory,
            project="bench",
            context_window=window,
            event_handler=events.append,
            overflow_wait_seconds=30.0,
        )
        session = Session(delay, seed)
        agent = agent_with_memory(om, FunctionModel(session.model), session.run_tests)
        started = time.monotonic()
        history = await module_turns(agent, [], 1, turns)
        elapsed = time.monotonic() - started
        answer = (await agent.run("what was the code word for turn 3?", message_history=history)).output
        om.close()
    sizes = session.sent  # measured on what the model received, not on the capability's own estimate
    estimated = [int(e.data["request_tokens"]) for e in events if e.type == "om_status"]
    overflows = [e for e in events if e.type == "om_overflow"]
    share = om.replaced_messages / om.observed_messages if om.observed_messages else 0.0
    return {
        "benchmark": "pydantic_ai_session",
        "turns": turns,
        "context_window": window,
        "model_delay_s": delay,
        "requests": len(sizes),
        "history_messages": len(history),
        "history_tokens": om.ledger.tokens(),
        "max_request_tokens": max(sizes),
        "max_estimated_request_tokens": max(estimated),
        "requests_over_window": sum(size > window for size in sizes),
        "overflow_events": len(overflows),
        "observed_messages": om.observed_messages,
        "observed_messages_replaced": om.replaced_messages,
        "observed_messages_replaced_share": round(share, 3),
        "answer_about_turn_3": answer,
        "elapsed_s": round(elapsed, 1),
        "meets_targets": max(sizes) <= window and share >= 0.8,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--window", type=int, default=16_000, help="the agent model's context window (tokens)")
    parser.add_argument("--model-delay", type=float, default=0.05, help="seconds the agent's model takes")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.turns, args.window, args.model_delay, args.seed)), indent=2))


if __name__ == "__main__":
    main()
