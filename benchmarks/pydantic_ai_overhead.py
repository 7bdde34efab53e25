"""What the pydantic-ai capability adds to a model request on a 2,000-message session, model calls excluded.

An embedded Obsmem in a temporary directory; a session of ``--messages`` messages (turns of a prompt, a
tool call, its result and an answer, ~100 tokens each) built by running the agent, then observed to the
end by the pipeline (pydantic-ai function models play the Observer and Reflector, answering at once).
Then ``--requests`` more model requests (a turn is two: the tool call and the answer), each resumed with
the whole history, as an agent continues a long session. Measured, model calls excluded:

- ``before_request``: the time inside the capability's ``before_model_request`` hook (append hand-off,
  projection read, compaction, pipeline requests, ``om_status``);
- ``after_run``: the capability's own time in ``wrap_run`` around the agent's run (the final answer into the
  ledger and handed to the append thread, the event poll at the run's end);
- ``per_request``: per turn, the sum of both on the turn's requests, divided by its requests: everything the
  capability adds on the loop, per model request (the figure the target applies to);
- ``event_poll``: each poll of the pipeline's event log (the background poller's, between runs too, and
  the run's end); on the loop, but not on a request's path;
- ``append``: each append of new events to the session, on the append thread (off the loop).

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
sys.path.insert(0, str(ROOT / "benchmarks"))

from pydantic_ai_turns import module_turns  # noqa: E402

from obsmem.app import Obsmem  # noqa: E402
from obsmem.pydantic_ai import ObservationalMemory  # noqa: E402
from obsmem.settings import load_settings  # noqa: E402
from support.pydantic_ai_session import agent_with_memory, staged_memory  # noqa: E402
from support.pydantic_ai_stages import CodingAgent  # noqa: E402

SETTINGS = {
    "observer": {"buffer_tokens": 2_000},
    "jobs": {"poll_seconds": 0.02},
    "reflector": {"reflect_after_observation_tokens": 12_000},
    "pools": {"observations_max_tokens": 10_000},
}


class TimedMemory(ObservationalMemory):
    """The capability, with the time of its hooks, its event polls and its appends recorded."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Named apart from pydantic-ai's hooks (``after_run`` is one).
        self.before_request_ms: list[float] = []
        self.after_run_ms: list[float] = []
        self.per_request_ms: list[float] = []
        self.poll_ms: list[float] = []
        self.append_ms: list[float] = []

    def clear(self) -> None:
        for timings in (self.before_request_ms, self.after_run_ms, self.per_request_ms, self.poll_ms, self.append_ms):
            timings.clear()

    async def before_model_request(self, ctx: Any, request_context: Any) -> Any:
        started = time.perf_counter()
        result = await super().before_model_request(ctx, request_context)
        self.before_request_ms.append((time.perf_counter() - started) * 1000)
        return result

    async def wrap_run(self, ctx: Any, *, handler: Any) -> Any:
        """The run's time less the agent's own (the handler, which holds the model requests and their
        ``before_model_request`` hooks, timed on their own)."""
        inside = 0.0
        hooks_before = len(self.before_request_ms)

        async def timed_handler() -> Any:
            nonlocal inside
            started = time.perf_counter()
            try:
                return await handler()
            finally:
                inside = time.perf_counter() - started

        started = time.perf_counter()
        result = await super().wrap_run(ctx, handler=timed_handler)
        after = (time.perf_counter() - started - inside) * 1000
        self.after_run_ms.append(after)
        hooks = self.before_request_ms[hooks_before:]
        if hooks:
            self.per_request_ms.append((sum(hooks) + after) / len(hooks))
        return result

    async def _poll_events(self) -> None:
        started = time.perf_counter()
        await super()._poll_events()
        self.poll_ms.append((time.perf_counter() - started) * 1000)

    def _append_events(self, events: list[dict[str, Any]]) -> None:
        started = time.perf_counter()
        super()._append_events(events)
        self.append_ms.append((time.perf_counter() - started) * 1000)


def percentiles(timings: list[float]) -> dict[str, Any]:
    ordered = sorted(timings)
    if not ordered:
        return {"count": 0}
    return {
        "count": len(ordered),
        "p50_ms": round(statistics.median(ordered), 3),
        "p90_ms": round(ordered[int(len(ordered) * 0.9)], 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 3),
        "mean_ms": round(statistics.fmean(ordered), 3),
        "max_ms": round(ordered[-1], 3),
    }


def tool_result(path: str) -> str:
    return f"ran the tests of {path}: 14 passed, 0 failed; coverage 87%; " + "ok " * 30


async def measure(messages: int, requests: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as data, Obsmem(load_settings(data_dir=Path(data), **SETTINGS)) as memory:
        om = staged_memory(memory, TimedMemory, project="bench", context_window=128_000)
        agent = agent_with_memory(om, CodingAgent().model(), tool_result)
        history = await module_turns(agent, [], 1, messages // 4)
        await om.flush(600)
        om.clear()
        history = await module_turns(agent, history, messages // 4 + 1, requests // 2)
        compaction, projection = om.last_compaction, om.last_projection
        om.close()
        assert compaction is not None and projection is not None
        per_request_p50 = statistics.median(om.per_request_ms)
        return {
            "benchmark": "pydantic_ai_overhead",
            "history_messages": len(history),
            "requests": len(om.before_request_ms),
            "per_request": percentiles(om.per_request_ms),
            "before_request": percentiles(om.before_request_ms),
            "after_run": percentiles(om.after_run_ms),
            "event_poll": percentiles(om.poll_ms),
            "append": percentiles(om.append_ms),
            "messages_sent_last_request": len(compaction.messages),
            "messages_replaced_last_request": compaction.replaced_messages,
            "memory_tokens": projection.tokens,
            "target_p50_ms": 5.0,
            "meets_target": per_request_p50 <= 5.0,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=2_000, help="messages in the session before measuring")
    parser.add_argument("--requests", type=int, default=200, help="model requests measured")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.messages, args.requests)), indent=2))


if __name__ == "__main__":
    main()
