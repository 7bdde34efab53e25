"""What the pydantic-ai capability adds to a model request on a 2,000-message session, model calls excluded.

An embedded Obsmem in a temporary directory; a session of ``--messages`` messages (turns of a prompt, a
tool call, its result and an answer, ~100 tokens each) built by running the agent, then observed to the
end by the pipeline (pydantic-ai function models play the Observer and Reflector, answering at once).
Then ``--requests`` more model requests (a turn is two: the tool call and the answer), each resumed with
the whole history, as an agent continues a long session. Measured: the time inside the capability's
``before_model_request`` hook (append hand-off, projection read, compaction, pipeline requests, event poll,
``om_status``), which is everything it adds before the model is called.

Target: p50 <= 5 ms. Prints JSON.

    python benchmarks/pydantic_ai_overhead.py --messages 2000 --requests 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import ModelMessage  # noqa: E402

from obsmem.app import Obsmem  # noqa: E402
from obsmem.pydantic_ai import ObservationalMemory  # noqa: E402
from obsmem.settings import load_settings  # noqa: E402
from support.pydantic_ai_stages import CodingAgent, observer_model, reflector_model  # noqa: E402

SETTINGS = {
    "observer": {"buffer_tokens": 2_000},
    "jobs": {"poll_seconds": 0.02},
    "reflector": {"reflect_after_observation_tokens": 12_000},
    "pools": {"observations_max_tokens": 10_000},
}


class TimedMemory(ObservationalMemory):
    """The capability, with the time of each ``before_model_request`` recorded."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timings: list[float] = []

    async def before_model_request(self, ctx: Any, request_context: Any) -> Any:
        started = time.perf_counter()
        result = await super().before_model_request(ctx, request_context)
        self.timings.append((time.perf_counter() - started) * 1000)
        return result


def tool_result(path: str) -> str:
    return f"ran the tests of {path}: 14 passed, 0 failed; coverage 87%; " + "ok " * 30


async def run_turns(agent: Agent[None, str], history: list[ModelMessage], first: int, count: int) -> list[ModelMessage]:
    for turn in range(first, first + count):
        prompt = f"turn {turn}: fix the failing test in src/module_{turn}.py; the code word for turn {turn} is w{turn}"
        history = (await agent.run(prompt, message_history=history)).all_messages()
    return history


async def measure(messages: int, requests: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as data, Obsmem(load_settings(data_dir=Path(data), **SETTINGS)) as memory:
        om = TimedMemory(
            memory,
            project="bench",
            session_id="s1",
            observer_model=observer_model(),
            reflector_model=reflector_model(),
            context_window=128_000,
        )
        agent = Agent(CodingAgent().model(), capabilities=[om], system_prompt="You are a careful coding agent.")
        agent.tool_plain(tool_result, name="run_tests")
        history = await run_turns(agent, [], 1, messages // 4)
        await om.flush(600)
        om.timings.clear()
        history = await run_turns(agent, history, messages // 4 + 1, requests // 2)
        timings = sorted(om.timings)
        compaction, projection = om.last_compaction, om.last_projection
        om.close()
        assert compaction is not None and projection is not None
        return {
            "benchmark": "pydantic_ai_overhead",
            "history_messages": len(history),
            "requests": len(timings),
            "p50_ms": round(statistics.median(timings), 3),
            "p90_ms": round(timings[int(len(timings) * 0.9)], 3),
            "p99_ms": round(timings[min(len(timings) - 1, int(len(timings) * 0.99))], 3),
            "mean_ms": round(statistics.fmean(timings), 3),
            "max_ms": round(timings[-1], 3),
            "messages_sent_last_request": len(compaction.messages),
            "messages_replaced_last_request": compaction.replaced_messages,
            "memory_tokens": projection.tokens,
            "target_p50_ms": 5.0,
            "meets_target": statistics.median(timings) <= 5.0,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=2_000, help="messages in the session before measuring")
    parser.add_argument("--requests", type=int, default=200, help="model requests measured")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.messages, args.requests)), indent=2))


if __name__ == "__main__":
    main()
