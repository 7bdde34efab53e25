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

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessagesTypeAdapter

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


def tool_result(path: str) -> str:
    return f"ran the tests of {path}: 14 passed, 0 failed " + "ok " * 40


async def run(data_dir: Path, history_file: Path, first: int, last: int) -> dict[str, int]:
    history = ModelMessagesTypeAdapter.validate_json(history_file.read_bytes()) if history_file.exists() else []
    with Obsmem(load_settings(data_dir=data_dir, **SETTINGS)) as memory:
        om = ObservationalMemory(
            memory,
            project="p",
            session_id="s1",
            observer_model=observer_model(),
            reflector_model=reflector_model(),
            context_window=8_000,
        )
        model = CodingAgent()
        agent = Agent(model.model(), capabilities=[om], system_prompt="You are a careful coding agent.")
        agent.tool_plain(tool_result, name="run_tests")
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
