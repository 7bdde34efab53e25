"""A longer run against ``obsmem serve`` on loopback: compaction keeps every request in the window, nothing
overflows, and a new capability resumed with ``message_history`` appends nothing twice.

The server observes with the scripted OpenAI-compatible model server; the agent's model is a pydantic-ai
``FunctionModel``. The window is small enough that the whole conversation would not fit in it, so the bound
holds only because observed messages are replaced by the memory.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage

from obsmem.app import Obsmem
from obsmem.pydantic_ai import ObservationalMemory, ObsmemClient, OMEvent
from obsmem.settings import load_settings
from support.http_server import KEY_ALL, KEYS, live_server
from support.pydantic_ai_runs import history_events, memory_in, request_tokens, run_turns, stored_events
from support.pydantic_ai_server import CondensingReflectorScript, QuotingObserverScript, server_settings
from support.pydantic_ai_session import tool_result
from support.pydantic_ai_stages import CodingAgent, tool_pairs_intact
from support.scripted_chat import PipelineScript, ScriptedChatServer

pytestmark = pytest.mark.timeout(300)

SMALL_WINDOW = 6_000
TURNS = 30


def long_tool_result(path: str) -> str:
    """A test run's output, long enough (~200 tokens) that the conversation soon outgrows the window."""
    return tool_result(path) + " passed" * 150


def coding_agent(om: ObservationalMemory, model: CodingAgent) -> Agent[None, str]:
    agent = Agent(model.model(), capabilities=[om], system_prompt="You are a careful coding agent.")
    agent.tool_plain(long_tool_result, name="run_tests")
    return agent


def pipeline() -> PipelineScript:
    """The server's models: a quoting Observer, and a Reflector whose short reflections let the Dropper keep
    the observations near the pool's 1,000 tokens."""
    return PipelineScript(observer=QuotingObserverScript(), reflector=CondensingReflectorScript())


def test_a_long_remote_run_stays_in_the_window_and_resumes_without_duplicates(tmp_path: Path) -> None:
    data = tmp_path / "data"
    events: list[OMEvent] = []
    resumed_events: list[OMEvent] = []
    with (
        ScriptedChatServer(pipeline()) as model_server,
        live_server(data, keys=KEYS, extra=server_settings(model_server.base_url)) as base,
    ):
        client = ObsmemClient(base, api_key=KEY_ALL)
        om = ObservationalMemory(
            client, project="p", session_id="s1", context_window=SMALL_WINDOW, event_handler=events.append
        )
        model = CodingAgent()
        history = asyncio.run(run_turns(coding_agent(om, model), om, range(1, TURNS + 1), []))
        before = asyncio.run(om.status())
        om.close()
        client.close()

        # A new capability (as a new process would make), resumed with the history over HTTP.
        client = ObsmemClient(base, api_key=KEY_ALL)
        resumed = ObservationalMemory(
            client, project="p", session_id="s1", context_window=SMALL_WINDOW, event_handler=resumed_events.append
        )
        resumed_model = CodingAgent()

        async def resume() -> list[ModelMessage]:
            return await run_turns(coding_agent(resumed, resumed_model), resumed, range(TURNS + 1, TURNS + 2), history)

        history_after = asyncio.run(resume())
        after = asyncio.run(resumed.status())
        resumed.close()
        client.close()

    # The conversation outgrew the window; every request still fit, with its tool pairs, and memory took the
    # place of observed messages in most of them.
    assert request_tokens(history) > SMALL_WINDOW
    assert max(request_tokens(request) for request in model.requests) < SMALL_WINDOW
    # The capability's own count, with the instructions and tool definitions, stayed in the window too.
    assert max(e.data["request_tokens"] for e in events if e.type == "om_status") < SMALL_WINDOW
    assert all(tool_pairs_intact(request) for request in model.requests)
    assert sum(memory_in(request) for request in model.requests) > TURNS
    assert not [e for e in events + resumed_events if e.type == "om_overflow"]
    assert before["observed_through_seq"] == before["last_seq"] == len(history_events(history))

    # The resumed run appended only its own turn (prompt, call, return, answer) and observed it all.
    assert after["last_seq"] == before["last_seq"] + 4
    assert after["observed_through_seq"] == after["last_seq"]
    # Its first request started from the watermark the first capability left, with the memory in place.
    first_status = next(e for e in resumed_events if e.type == "om_status")
    assert first_status.data["windows"]["buffered"]["observed_through_seq"] == before["observed_through_seq"]
    assert memory_in(resumed_model.requests[0])
    with Obsmem(load_settings(data_dir=data)) as service:
        assert stored_events(service) == history_events(history_after)
