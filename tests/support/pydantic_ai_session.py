"""Runs turns of the scripted coding agent with the capability, in a process of its own (not a test module).

    python tests/support/pydantic_ai_session.py DATA_DIR HISTORY_FILE FIRST_TURN LAST_TURN

Loads the message history from HISTORY_FILE when it exists, runs turns FIRST_TURN..LAST_TURN (each one
resumed with the history so far), flushes the memory, writes the history back and prints a JSON summary:
the session's last seq and watermark, and the number of requests the agent's model received.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, TypeVar

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessagesTypeAdapter
from pydantic_ai.models import Model

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from obsmem.app import Obsmem  # noqa: E402
from obsmem.pydantic_ai import ObservationalMemory  # noqa: E402
from obsmem.settings import load_settings  # noqa: E402
from support.pydantic_ai_stages import CodingAgent, observer_model, reflector_model  # noqa: E402

SETTINGS = {
    "observer": {"buffer_tokens": 100},
    "jobs": {"poll_seconds": 0.02, "retry_backoff_seconds": 0.01},
    "reflector": {"reflect_after_observation_tokens": 1_500},
    "pools": {"observations_max_tokens": 1_000},
}


_Memory = TypeVar("_Memory", bound=ObservationalMemory)


def tool_result(path: str) -> str:
    return f"ran the tests of {path}: 14 passed, 0 failed " + "ok " * 40


def staged_memory(
    memory: Obsmem, kind: type[_Memory], *, project: str = "p", session_id: str = "s1", **options: Any
) -> _Memory:
    """The capability (``kind``: it or a subclass that measures it) with the scripted Observer and Reflector."""
    return kind(
        memory,
        project=project,
        session_id=session_id,
        observer_model=observer_model(),
        reflector_model=reflector_model(),
        **options,
    )


def agent_with_memory(om: ObservationalMemory, model: Model, run_tests: Any = tool_result) -> Agent[None, str]:
    """The coding agent's shape: its system prompt, the memory as a capability and a run_tests tool."""
    agent = Agent(model, capabilities=[om], system_prompt="You are a careful coding agent.")
    agent.tool_plain(run_tests, name="run_tests")
    return agent


async def run(data_dir: Path, history_file: Path, first: int, last: int) -> dict[str, int]:
    history = ModelMessagesTypeAdapter.validate_json(history_file.read_bytes()) if history_file.exists() else []
    with Obsmem(load_settings(data_dir=data_dir, **SETTINGS)) as memory:
        om = staged_memory(memory, ObservationalMemory, context_window=8_000)
        model = CodingAgent()
        agent = agent_with_memory(om, model.model())
        for turn in range(first, last + 1):
            prompt = f"turn {turn}: fix the failing test; the code word for turn {turn} is word{turn}"
            result = await agent.run(prompt, message_history=history)
            history = result.all_messages()
        await om.flush(30)
        status = await om.status()
        om.close()
    history_file.write_bytes(ModelMessagesTypeAdapter.dump_json(history))
    return {
        "last_seq": status["last_seq"],
        "observed_through_seq": status["observed_through_seq"],
        "requests": len(model.requests),
    }


if __name__ == "__main__":
    data, history_path, start, end = sys.argv[1:5]
    print(json.dumps(asyncio.run(run(Path(data), Path(history_path), int(start), int(end)))))
