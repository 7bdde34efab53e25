"""The pydantic-ai capability over an embedded Obsmem: observe, compact, thresholds, the last resort, events.

pydantic-ai's ``FunctionModel`` plays the agent's model and, through obsmem's adapter, the Observer and the
Reflector (tests/support/pydantic_ai_stages.py); everything else is real: the data directory, the workers,
the pipeline's jobs and the projection.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from obsmem.app import Obsmem
from obsmem.errors import SeqConflict
from obsmem.pydantic_ai import ObservationalMemory, OMEvent
from obsmem.pydantic_ai.messages import message_events
from obsmem.settings import load_settings
from support.pydantic_ai_runs import (
    WINDOW,
    coding_agent,
    history_events,
    logging_agent,
    memory_in,
    request_tokens,
    run_turns,
    session_memory,
    stored_events,
)
from support.pydantic_ai_session import SETTINGS
from support.pydantic_ai_stages import CodingAgent, observer_model, reflector_model, tool_pairs_intact

pytestmark = pytest.mark.timeout(300)

SESSION_SCRIPT = Path(__file__).parent / "support" / "pydantic_ai_session.py"


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[Obsmem]:
    service = Obsmem(load_settings(data_dir=tmp_path / "data", **SETTINGS))
    yield service
    service.close()


def test_a_sixty_turn_run_sends_memory_in_place_of_observed_messages(memory: Obsmem) -> None:
    events: list[OMEvent] = []
    om = session_memory(
        memory,
        events,
        observer_model=observer_model(),
        reflector_model=reflector_model(),
        context_window=WINDOW,
    )
    model = CodingAgent()
    agent = coding_agent(om, model)

    async def scenario() -> tuple[list[ModelMessage], str]:
        history = await run_turns(agent, om, range(1, 61), [])
        final = await agent.run("what was the code word for turn 3?", message_history=history)
        return final.all_messages(), final.output

    history, answer = asyncio.run(scenario())
    om.close()

    # The fact from turn 3 was long observed and replaced: the answer came from memory.
    assert answer == "The code word for turn 3 was word3."
    last = model.requests[-1]
    assert memory_in(last) and len(last) < 10 < len(history)
    verbatim = [p.content for m in last for p in m.parts if isinstance(p, UserPromptPart)]
    assert not any(str(text).startswith("turn 3:") for text in verbatim)  # only the memory still says it
    # Every message reached the store exactly once, in order.
    assert stored_events(memory) == history_events(history)
    assert len(stored_events(memory)) == sum(len(message_events(m)) for m in history)
    # Compaction never separated a tool call from its return, kept the system prompt, stayed in the window.
    assert all(tool_pairs_intact(request) for request in model.requests)
    assert all("careful coding agent" in json.dumps([str(p) for m in r for p in m.parts]) for r in model.requests)
    assert max(request_tokens(request) for request in model.requests) < WINDOW
    assert sum(memory_in(request) for request in model.requests) > 100
    assert not [e for e in events if e.type == "om_overflow"]
    # The runs' own histories kept every original message (only requests are compacted), and each run
    # continued the numbering of the one before (the ledger never had to start over).
    assert not memory_in(history)
    assert om.ledger.resets == 0


def test_a_run_resumed_in_a_new_process_appends_nothing_twice(tmp_path: Path) -> None:
    data, history = tmp_path / "data", tmp_path / "history.json"

    def turns(first: int, last: int) -> dict[str, int]:
        command = [sys.executable, str(SESSION_SCRIPT), str(data), str(history), str(first), str(last)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = turns(1, 8)
    assert first["last_seq"] == first["observed_through_seq"] > 8 * 4
    again = turns(9, 9)  # a new process, resumed with message_history
    assert again["last_seq"] == first["last_seq"] + 4  # prompt, call, return, answer: no event twice
    assert again["observed_through_seq"] == again["last_seq"]
    with Obsmem(load_settings(data_dir=data, **SETTINGS)) as service:
        from pydantic_ai.messages import ModelMessagesTypeAdapter

        messages = ModelMessagesTypeAdapter.validate_json(history.read_bytes())
        assert stored_events(service) == history_events(messages)


def test_a_session_whose_last_event_an_older_release_stored_with_long_arguments_whole_resumes(tmp_path: Path) -> None:
    """Tool arguments longer than an event's content may be are now stored as their cut JSON text; a release
    before stored them whole. A resumed run sends the session's last stored event again to prove its history:
    when that was such a call, the cut copy was a seq_conflict, and no event of the session was stored again."""
    args = {"path": "f", "text": "z" * 2_100_000}
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("write it")]),
        ModelResponse(parts=[ToolCallPart("write_file", args, tool_call_id="c1")]),
        ModelRequest(parts=[ToolReturnPart("write_file", "ok", tool_call_id="c1")]),
        ModelResponse(parts=[TextPart("written")]),
    ]
    older = [event for message in history[:2] for event in message_events(message)]
    older[-1]["tool_args"] = args  # as the release before stored it: whole
    with Obsmem(load_settings(data_dir=tmp_path / "data", observer={"enabled": False})) as service:
        service.append_events("p", "s1", older)
        om = ObservationalMemory(service, project="p", session_id="s1", tools=False)
        agent = Agent(FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("done")])), capabilities=[om])

        async def scenario() -> None:
            await agent.run("and again", message_history=history)
            await om.flush(5)

        asyncio.run(scenario())
        unsent = om.unsent
        om.close()
        assert unsent == 0 and service.session_status("p", "s1").last_seq == 6


def test_a_history_that_differs_from_the_session_is_refused(memory: Obsmem) -> None:
    om = ObservationalMemory(memory, project="p", session_id="s1", context_window=WINDOW, tools=False)
    agent = coding_agent(om, CodingAgent())

    async def scenario() -> None:
        await run_turns(agent, om, range(1, 3), [])
        other = ObservationalMemory(memory, project="p", session_id="s1", context_window=WINDOW, tools=False)
        stranger_model = CodingAgent()
        stranger = coding_agent(other, stranger_model)
        with pytest.raises(SeqConflict, match="message_history"):  # no message_history: its seqs are taken
            await stranger.run("turn 1: something else entirely")  # refused before its model is called
        assert not stranger_model.requests

    asyncio.run(scenario())
    assert len(stored_events(memory)) == 9  # a system prompt and two turns: nothing of the stranger's


def test_thresholds_come_from_the_profile_then_context_window_then_mastra(memory: Obsmem) -> None:
    profiled = FunctionModel(CodingAgent(), profile={"context_window": 50_000})
    bare = FunctionModel(CodingAgent())
    om = ObservationalMemory(memory, project="p", session_id="s1", context_window=20_000)
    assert (om.get_observation_threshold(profiled), om.get_reflection_threshold(profiled)) == (15_000, 20_000)
    assert (om.get_observation_threshold(bare), om.get_reflection_threshold(bare)) == (6_000, 8_000)
    fallback = ObservationalMemory(memory, project="p", session_id="s2")
    assert (fallback.get_observation_threshold(bare), fallback.get_reflection_threshold(bare)) == (30_000, 40_000)
    assert fallback.thresholds.source == "default" and fallback.thresholds.context_window is None
    explicit = ObservationalMemory(memory, project="p", session_id="s3", observation_threshold=5_000)
    assert explicit.get_observation_threshold(profiled) == 5_000
    assert explicit.get_reflection_threshold(profiled) == 20_000

    statuses: list[OMEvent] = []
    om = ObservationalMemory(memory, project="p", session_id="s4", event_handler=statuses.append, tools=False)
    agent = Agent(FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("ok")]), profile={"context_window": 50_000}))
    asyncio.run(agent.run("hello", capabilities=[om]))
    status = next(e for e in statuses if e.type == "om_status")
    assert status.data["context_window"] == 50_000 and status.data["context_window_source"] == "profile"
    assert status.data["threshold"] == 15_000 and status.data["reflection_threshold"] == 20_000
    for capability in (om, fallback, explicit):
        capability.close()


def failing_observer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    raise RuntimeError("the observer's provider is down")


def test_an_overflowing_request_waits_then_is_reported_never_truncated(memory: Obsmem) -> None:
    events: list[OMEvent] = []
    om = session_memory(
        memory,
        events,
        observer_model=FunctionModel(failing_observer),
        context_window=2_000,
        overflow_wait_seconds=1.0,
        tools=False,
    )
    model = CodingAgent()
    agent = logging_agent(om, model, log_lines=900)  # ~2,000 tokens: more than the window holds

    started = time.monotonic()
    asyncio.run(agent.run("turn 1: run the tests"))
    om.close()
    overflow = [e for e in events if e.type == "om_overflow"]
    assert overflow and overflow[0].data["waited_ms"] >= 1_000 and time.monotonic() - started < 60
    assert overflow[0].data["request_tokens"] > overflow[0].data["budget_tokens"]
    # Nothing was dropped: the model got the whole tool result.
    assert "log line " * 900 in json.dumps([str(p.content) for p in model.requests[-1][-1].parts])
    failed = [e for e in events if e.type == "om_observation_failed"]
    assert failed and "model_unavailable" in failed[0].data["error"] and "down" not in failed[0].data["error"]


def slow_observer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    from support.pydantic_ai_stages import observer

    time.sleep(0.3)
    return observer(messages, info)


def test_the_last_resort_compacts_what_the_wait_observed(memory: Obsmem) -> None:
    events: list[OMEvent] = []
    om = session_memory(
        memory,
        events,
        observer_model=FunctionModel(slow_observer),
        context_window=2_500,
        overflow_wait_seconds=20.0,
        tools=False,
    )
    model = CodingAgent()
    agent = logging_agent(om, model, log_lines=300)  # ~700 tokens per result: three turns overflow the window

    async def scenario() -> None:
        history: list[ModelMessage] = []
        for turn in range(1, 5):
            history = (await agent.run(f"turn {turn}: run the tests", message_history=history)).all_messages()

    asyncio.run(scenario())
    om.close()
    assert not [e for e in events if e.type == "om_overflow"]
    assert memory_in(model.requests[-1])
    assert max(request_tokens(request) for request in model.requests) < 2_500


def test_events_and_status_reach_mastra_parity(memory: Obsmem) -> None:
    handled: list[OMEvent] = []
    iterated: list[OMEvent] = []
    om = session_memory(
        memory,
        handled,
        observer_model=observer_model(),
        reflector_model=reflector_model(),
        context_window=WINDOW,
        reflection_threshold=300,
        include_observations=True,
        tools=False,
    )
    agent = coding_agent(om, CodingAgent())

    async def scenario() -> dict[str, Any]:
        async def collect() -> None:
            async for event in om.events():
                iterated.append(event)

        reader = asyncio.create_task(collect())
        await asyncio.sleep(0)
        history = await run_turns(agent, om, range(1, 7), [])
        deadline = time.monotonic() + 30
        while not any(e.type == "om_reflection_end" for e in handled) and time.monotonic() < deadline:
            await agent.run("turn 99: one more", message_history=history)
            await om.flush(10)
        status = await om.status()
        om.close()
        await asyncio.wait_for(reader, 5)
        return status

    status = asyncio.run(scenario())
    types = {e.type for e in handled}
    wanted = {
        "om_status",
        "om_observation_start",
        "om_observation_end",
        "om_buffering_start",
        "om_buffering_end",
        "om_activation",
        "om_reflection_start",
        "om_reflection_end",
    }
    assert wanted <= types
    assert [e.type for e in iterated] == [e.type for e in handled]
    end = next(e for e in handled if e.type == "om_observation_end")
    assert end.data["observation_texts"] and all(isinstance(line, str) for line in end.data["observation_texts"])
    assert len(end.data["observation_texts"]) == end.data["observations"]  # the texts and obsmem's count
    buffered = next(e for e in handled if e.type == "om_buffering_end")
    assert buffered.cycle_id == end.cycle_id and buffered.data["tokens_buffered"] > 0
    activation = next(e for e in handled if e.type == "om_activation")
    assert activation.data["tokens_activated"] > 0 and activation.data["messages_replaced"] > 0
    om_status = [e for e in handled if e.type == "om_status"][-1].data
    assert {"windows", "step_number", "generation_count", "record_id", "thread_id"} <= set(om_status)
    assert set(om_status["windows"]) == {"active", "buffered"}
    assert status["generation_count"] >= 1 and status["step_number"] >= 1
    assert status["pre_reflection_tokens"] > 0
    assert set(status["buffered"]) == {"observations", "reflection"}
    assert status["buffered"]["observations"]["projected_message_removal"] == status["observed_through_seq"]
    assert status["buffered"]["reflection"]["input_observation_tokens"] > 0


def test_observation_payloads_are_opt_in(memory: Obsmem) -> None:
    handled: list[OMEvent] = []
    om = session_memory(
        memory,
        handled,
        observer_model=observer_model(),
        context_window=WINDOW,
        tools=False,
    )
    asyncio.run(run_turns(coding_agent(om, CodingAgent()), om, range(1, 3), []))
    om.close()
    ends = [e for e in handled if e.type in ("om_observation_end", "om_buffering_end")]
    assert ends and all("observation_texts" not in e.data for e in ends)
    assert all("observations" not in e.data for e in ends if e.type == "om_buffering_end")
    assert all("word1" not in json.dumps(e.to_dict()) for e in handled)


def test_a_failing_observer_is_reported_and_the_run_goes_on(memory: Obsmem) -> None:
    handled: list[OMEvent] = []
    om = session_memory(
        memory,
        handled,
        observer_model=FunctionModel(failing_observer),
        context_window=WINDOW,
        tools=False,
    )
    agent = coding_agent(om, CodingAgent())
    history = asyncio.run(run_turns(agent, om, range(1, 3), [], wait=1))
    status = asyncio.run(om.status())
    om.close()
    assert history[-1].parts[0].content.startswith("Done with run_tests")  # type: ignore[union-attr]
    failed = [e for e in handled if e.type == "om_observation_failed"]
    assert failed and failed[0].data["error"].startswith("model_unavailable")
    assert status["last_error"]["code"] == "model_unavailable"
    assert status["observed_through_seq"] == 0


def test_switching_the_observer_model_routes_the_next_job(memory: Obsmem) -> None:
    om = ObservationalMemory(memory, project="p", session_id="s1", observer_model=FunctionModel(failing_observer))
    agent = coding_agent(om, CodingAgent())

    async def scenario() -> int:
        history = await run_turns(agent, om, range(1, 2), [], wait=1)
        await om.switch_observer_model(observer_model())
        await run_turns(agent, om, range(2, 3), history)
        return (await om.status())["observed_through_seq"]

    assert asyncio.run(scenario()) > 0
    om.close()


def test_memory_search_and_recall_are_the_agents_tools(memory: Obsmem) -> None:
    om = ObservationalMemory(memory, project="p", session_id="s1", observer_model=observer_model())
    calls: list[str] = []

    def searching_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        names = {tool.name for tool in info.function_tools}
        assert {"memory_search", "recall"} <= names
        last = messages[-1]
        returns = [p for p in last.parts if getattr(p, "part_kind", "") == "tool-return"]
        if not returns:
            return ModelResponse(parts=[ToolCallPart("memory_search", {"query": "word1"})])
        calls.append(str(returns[0].content))
        if returns[0].tool_name == "memory_search":
            hit = json.loads(returns[0].content)["hits"][0]
            return ModelResponse(parts=[ToolCallPart("recall", {"id": hit["id"]})])
        return ModelResponse(parts=[TextPart("found it")])

    async def scenario() -> None:
        history = await run_turns(coding_agent(om, CodingAgent()), om, range(1, 2), [])
        await Agent(FunctionModel(searching_model), capabilities=[om]).run("search memory", message_history=history)

    asyncio.run(scenario())
    om.close()
    assert "word1" in calls[0]
    recalled = json.loads(calls[1])
    assert recalled["memory"]["session_id"] == "s1" and recalled["sources"]


@pytest.mark.parametrize("args", ['{"x": NaN}', "[" * 70 + "]" * 70, "[" * 100_000])
def test_tool_arguments_obsmem_would_refuse_parsed_are_stored_as_written(tmp_path: Path, args: str) -> None:
    """A model's arguments that parse to a value obsmem refuses (NaN, deeper than 64 levels) are kept as the
    text the model wrote: refused as an event, they stopped every later append of the session at them."""
    response = ModelResponse(parts=[ToolCallPart(tool_name="bash", args=args, tool_call_id="c1")])
    events = message_events(response)
    assert [event["tool_args"] for event in events] == [args]
    with Obsmem(load_settings(data_dir=tmp_path / "data")) as service:
        receipt = service.append_events("p", "s1", events)
        assert receipt.appended == 1


LONG_OUTPUT = "log line\n" * 240_000  # 2,160,000 characters: more than an event may hold
STORABLE_LATER: list[tuple[str, Any, str]] = [
    ("content", ToolReturnPart("read_file", LONG_OUTPUT, tool_call_id="c1"), "characters not stored]"),
    (
        "content",
        ToolReturnPart("read_file", "bytes \udcff\udcfe read as text", tool_call_id="c1"),
        "\ufffd",
    ),
    ("content", UserPromptPart("pasted text with a lone \ud800 surrogate"), "\ufffd"),
    ("tool_name", ToolReturnPart("t" * 300, "unknown tool", tool_call_id="c1", outcome="retried"), "t" * 256),
    ("tool_call_id", ToolReturnPart("read_file", "ok", tool_call_id="c" * 300), "c" * 256),
    ("tool_args", ToolCallPart("write_file", {"text": "lone \udc80 surrogate"}, tool_call_id="c1"), "\ufffd"),
    ("tool_args", ToolCallPart("write_file", '{"text": "lone \udc80 surrogate"}', tool_call_id="c1"), "\ufffd"),
    ("tool_args", ToolCallPart("measure", {"x": float("nan")}, tool_call_id="c1"), "NaN"),
    ("tool_args", ToolCallPart("write_file", {"text": "z" * 2_100_000}, tool_call_id="c1"), "characters not stored]"),
]


@pytest.mark.parametrize(("field", "part", "kept"), STORABLE_LATER)
def test_a_message_obsmem_would_refuse_is_stored_in_a_form_it_takes(
    tmp_path: Path, field: str, part: Any, kept: str
) -> None:
    """A part whose text is longer than an event may hold, holds a lone surrogate (a file read with
    surrogateescape), or names a tool at more than 256 characters becomes an event obsmem stores: refused,
    it stopped every later append of the session at it, so nothing the agent said after it was kept."""
    message = ModelResponse(parts=[part]) if isinstance(part, ToolCallPart) else ModelRequest(parts=[part])
    events = message_events(message)
    with Obsmem(load_settings(data_dir=tmp_path / "data")) as service:
        receipt = service.append_events("p", "s1", [*events, {"role": "user", "content": "the next message"}])
        assert receipt.appended == 2
        with service.database("p").read() as conn:
            (value,) = conn.execute(f"SELECT {field} FROM events WHERE seq = 1").fetchone()
    assert kept in value and len(value) <= 2_000_000
    if field in ("tool_name", "tool_call_id"):
        assert value == kept


def test_a_secret_the_cut_of_a_tool_output_longer_than_an_event_may_hold_splits_is_redacted_whole(
    tmp_path: Path,
) -> None:
    """The output was cut before obsmem redacted it, so a token the cut split reached obsmem as a fragment
    (ghp_Ab3dE...) no detector recognised, and was stored and shown to the Observer."""
    token = "ghp_" + "Ab3dEf7hIjKl9nOpQr5tUvWx1zA2b3C4d5E6"
    # Tokens one after another over the last thousand characters an event may hold: the cut splits one.
    output = "x" * 1_999_000 + f" {token}" * 100
    events = message_events(ModelRequest(parts=[ToolReturnPart("read_file", output, tool_call_id="c1")]))
    with Obsmem(load_settings(data_dir=tmp_path / "data")) as service:
        assert service.append_events("p", "s1", events).appended == 1
        with service.database("p").read() as conn:
            (content,) = conn.execute("SELECT content FROM events WHERE seq = 1").fetchone()
    assert "ghp_" not in content and "Ab3dE" not in content
    assert "[REDACTED:github_token]" in content and content.endswith("characters not stored]")


def test_a_tool_output_longer_than_an_event_may_hold_does_not_stop_the_sessions_appends(memory: Obsmem) -> None:
    """An agent that reads a large file: the cut output is stored, and so is everything the run says after it."""

    def reader(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(part, ToolReturnPart) for part in messages[-1].parts):
            return ModelResponse(parts=[TextPart("the log ends with a passing test")])
        return ModelResponse(parts=[ToolCallPart("read_file", {"path": "build.log"}, tool_call_id="c1")])

    om = ObservationalMemory(memory, project="p", session_id="s1", tools=False, start_workers=False)
    agent = Agent(FunctionModel(reader), capabilities=[om])

    @agent.tool_plain
    def read_file(path: str) -> str:
        return LONG_OUTPUT

    async def scenario() -> list[ModelMessage]:
        first = await agent.run("read the build log")
        second = await agent.run("and what did it say?", message_history=first.all_messages())
        await om.flush(5)
        return second.all_messages()

    history = asyncio.run(scenario())
    om.close()
    stored = stored_events(memory)
    assert [row[0] for row in stored] == list(range(1, len(history_events(history)) + 1))
    assert stored[-1][3] == "the log ends with a passing test"
    output = next(row[3] for row in stored if row[2] == "tool_result")
    assert output.startswith(LONG_OUTPUT[:1000]) and output.endswith("characters not stored]")


@pytest.mark.parametrize("closing", ["older", "newer"])
def test_closing_one_agents_memory_leaves_the_projects_other_agent_its_observer(memory: Obsmem, closing: str) -> None:
    """Two agents on one project, each with its capability routing the project's Observer to a pydantic-ai
    model: the first to close returned the role to the settings (which name no model here) under the other,
    so the other's session was never observed again (its requests refused with model_not_configured)."""
    options: dict[str, Any] = {"context_window": WINDOW, "tools": False}
    older = ObservationalMemory(memory, project="p", session_id="s1", observer_model=observer_model(), **options)
    newer = ObservationalMemory(memory, project="p", session_id="s2", observer_model=observer_model(), **options)
    closed, running = (older, newer) if closing == "older" else (newer, older)
    closed.close()

    async def scenario() -> dict[str, Any]:
        await run_turns(coding_agent(running, CodingAgent()), running, range(1, 3), [])
        return await running.status()

    status = asyncio.run(scenario())
    running.close()
    assert status["observed_through_seq"] == status["last_seq"] > 0
    # Once both closed, nothing of either stays routed: the project is back on its settings.
    assert memory.pipeline.clients.routed("p", "observer") is None
