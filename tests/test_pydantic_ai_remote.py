"""The pydantic-ai capability against ``obsmem serve`` on loopback: the same scenario, through HTTP.

The server runs in its own process with its own workers; its Observer, Reflector and Dropper are the
scripted OpenAI-compatible server (a model cannot run here). The agent's model is a pydantic-ai
``FunctionModel``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from obsmem.app import Obsmem
from obsmem.errors import ConfigurationError
from obsmem.pydantic_ai import ObservationalMemory, ObsmemClient, OMEvent
from obsmem.pydantic_ai.messages import event_bytes, fit_event
from obsmem.settings import load_settings
from support.http_server import KEY_ALL, KEYS, bearer, free_port, live_server
from support.pydantic_ai_runs import WINDOW, coding_agent, history_events, memory_in, run_turns, stored_events
from support.pydantic_ai_server import QuotingObserverScript, server_settings
from support.pydantic_ai_stages import CodingAgent, observer_model, tool_pairs_intact
from support.scripted_chat import PipelineScript, ScriptedChatServer

pytestmark = pytest.mark.timeout(300)


def test_the_same_scenario_through_an_obsmem_server(tmp_path: Path) -> None:
    data = tmp_path / "data"
    events: list[OMEvent] = []
    with (
        ScriptedChatServer(PipelineScript(observer=QuotingObserverScript())) as model_server,
        live_server(data, keys=KEYS, extra=server_settings(model_server.base_url)) as base,
    ):
        client = ObsmemClient(base, api_key=KEY_ALL)
        om = ObservationalMemory(
            client, project="p", session_id="s1", context_window=WINDOW, event_handler=events.append
        )
        model = CodingAgent()
        agent = coding_agent(om, model)

        async def scenario() -> tuple[list[ModelMessage], str]:
            history = await run_turns(agent, om, range(1, 16), [])
            final = await agent.run("what was the code word for turn 3?", message_history=history)
            await om.flush(30)
            return final.all_messages(), final.output

        history, answer = asyncio.run(scenario())
        status = asyncio.run(om.status())
        asyncio.run(om.switch_reflector_model("scripted-large", context_window_tokens=65_536))
        models = httpx.get(f"{base}/v1/projects/p/models", headers=bearer(KEY_ALL)).json()["models"]
        om.close()
        client.close()

    assert answer == "The code word for turn 3 was word3."
    assert memory_in(model.requests[-1]) and len(model.requests[-1]) < 10 < len(history)
    assert all(tool_pairs_intact(request) for request in model.requests)
    with Obsmem(load_settings(data_dir=data)) as service:
        assert stored_events(service) == history_events(history)
    assert {"buffered", "step_number", "pre_reflection_tokens"} <= set(status)
    assert status["observed_through_seq"] == status["last_seq"] == len(history_events(history))
    types = {e.type for e in events}
    assert {"om_status", "om_observation_end", "om_buffering_end", "om_activation"} <= types
    assert models["reflector"]["model_id"] == "scripted-large" and models["reflector"]["source"] == "override"
    assert models["dropper"]["model_id"] == "scripted-large"


def test_the_tools_answer_through_the_server(tmp_path: Path) -> None:
    seen: list[str] = []

    def searching_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return ModelResponse(parts=[ToolCallPart("memory_search", {"query": "word2"})])
        seen.append(str(returns[0].content))
        if returns[0].tool_name == "memory_search":
            hits = json.loads(returns[0].content)["hits"]
            return ModelResponse(parts=[ToolCallPart("recall", {"id": hits[0]["id"]})])
        if len(seen) == 2:
            return ModelResponse(parts=[ToolCallPart("recall", {"id": "zz"})])
        return ModelResponse(parts=[TextPart("done")])

    with (
        ScriptedChatServer(PipelineScript(observer=QuotingObserverScript())) as model_server,
        live_server(tmp_path / "data", keys=KEYS, extra=server_settings(model_server.base_url)) as base,
    ):
        client = ObsmemClient(base, api_key=KEY_ALL)
        om = ObservationalMemory(client, project="p", session_id="s1", context_window=WINDOW)

        async def scenario() -> None:
            history = await run_turns(coding_agent(om, CodingAgent()), om, range(1, 3), [])
            await Agent(FunctionModel(searching_model), capabilities=[om]).run("search", message_history=history)

        asyncio.run(scenario())
        om.close()
        client.close()
    assert "word2" in seen[0]
    assert json.loads(seen[1])["memory"]["session_id"] == "s1"
    assert seen[2].startswith("invalid_id: ")  # the same error text as the embedded and MCP tools


def test_a_remote_server_refuses_pipeline_models_and_wrong_keys(tmp_path: Path) -> None:
    client = ObsmemClient("http://127.0.0.1:9", api_key="x")
    with pytest.raises(ConfigurationError, match="server uses its configured models"):
        ObservationalMemory(client, project="p", session_id="s1", observer_model=observer_model())
    client.close()
    with live_server(tmp_path / "data", keys=KEYS) as base:
        wrong = ObsmemClient(base, api_key="not-a-key-0123456789abcdef")
        om = ObservationalMemory(wrong, project="p", session_id="s1", tools=False)
        agent = Agent(FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("ok")])), capabilities=[om])
        with pytest.raises(Exception, match="unauthorized|API key"):  # noqa: B017 - the server's own error
            asyncio.run(agent.run("hello"))
        om.close()
        wrong.close()


def test_appends_larger_than_the_servers_body_limit_are_sent_in_parts(tmp_path: Path) -> None:
    """Three large tool outputs of one model response, together over the server's body limit: the append
    is sent in parts each under it. Sent as one body, it was refused (413) at every retry, so nothing of the
    session after the first prompt was ever stored."""
    output = "y" * 400_000

    def reader(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(part, ToolReturnPart) for part in messages[-1].parts):
            return ModelResponse(parts=[TextPart("read them all")])
        return ModelResponse(
            parts=[ToolCallPart("read_file", {"path": f"f{i}"}, tool_call_id=f"c{i}") for i in range(3)]
        )

    data = tmp_path / "data"
    with live_server(data, max_body_bytes=1024 * 1024) as base:
        client = ObsmemClient(base)
        om = ObservationalMemory(client, project="p", session_id="s1", tools=False)
        agent = Agent(FunctionModel(reader), capabilities=[om])

        @agent.tool_plain
        def read_file(path: str) -> str:
            return output

        async def scenario() -> list[ModelMessage]:
            first = await agent.run("read the three files")
            second = await agent.run("done?", message_history=first.all_messages())
            await om.flush(5)
            return second.all_messages()

        history = asyncio.run(scenario())
        om.close()
        client.close()
    with Obsmem(load_settings(data_dir=data)) as service:
        stored = stored_events(service)
    assert stored == history_events(history)
    assert sum(row[3] == output for row in stored) == 6  # two runs of three reads


def test_a_run_goes_on_while_the_server_is_away_and_catches_up_when_it_is_back(tmp_path: Path) -> None:
    """The server stops between two runs (a restart): the run meanwhile is answered, sent with the memory the
    capability last read, and its messages are appended once the server is back. The projection read raised
    service_unavailable out of the run, although a failed append was already kept for the next request."""
    data, port = tmp_path / "data", free_port()
    client = ObsmemClient(f"http://127.0.0.1:{port}", timeout_seconds=5)
    om = ObservationalMemory(client, project="p", session_id="s1", context_window=WINDOW, tools=False)
    model = CodingAgent()
    agent = coding_agent(om, model)
    prompts = [f"turn {turn}: fix the failing test" for turn in (1, 2, 3)]
    history: list[ModelMessage] = []

    async def turn(prompt: str) -> None:
        nonlocal history
        history = (await agent.run(prompt, message_history=history)).all_messages()

    with live_server(data, port=port):
        asyncio.run(turn(prompts[0]))
    asyncio.run(turn(prompts[1]))  # nothing listens on the port
    assert str(history[-1].parts[-1].content).startswith("Done with run_tests")  # type: ignore[union-attr]
    with live_server(data, port=port):
        asyncio.run(turn(prompts[2]))
        asyncio.run(om.flush(5))
        om.close()
        client.close()
    with Obsmem(load_settings(data_dir=data)) as service:
        assert stored_events(service) == history_events(history)


@pytest.mark.parametrize("limit", [None, 1024 * 1024], ids=["default-limit", "1-MiB-limit"])
def test_a_single_event_over_the_servers_body_limit_is_cut_to_fit(tmp_path: Path, limit: int | None) -> None:
    """One event alone over the server's body limit: a tool output of NUL characters read from a binary file
    (each one six bytes of JSON, so under the 2,000,000 characters an event holds but 9 MB posted) and a tool
    call whose arguments carry a whole file (tool arguments have no length limit). Sent whole, each was
    refused (413) at every retry, and nothing of the session after it was ever stored. Each is now cut to fit
    the limit (the server's default, or the one the client is told), saying what was cut."""
    body_limit = limit or 8 * 1024 * 1024
    binary = "\x00" * (body_limit * 9 // 8 // 6)  # 9/8 of the limit as JSON
    written = "print('hello')\n" * (body_limit * 9 // 8 // 16)

    def writer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(part, ToolReturnPart) for part in messages[-1].parts):
            return ModelResponse(parts=[TextPart("wrote it")])
        return ModelResponse(
            parts=[
                ToolCallPart("read_file", {"path": "core"}, tool_call_id="c1"),
                ToolCallPart("write_file", {"path": "hello.py", "text": written}, tool_call_id="c2"),
            ]
        )

    data = tmp_path / "data"
    server_options = {} if limit is None else {"max_body_bytes": limit}
    with live_server(data, **server_options) as base:
        client = ObsmemClient(base, **server_options)
        om = ObservationalMemory(client, project="p", session_id="s1", tools=False)
        agent = Agent(FunctionModel(writer), capabilities=[om])

        @agent.tool_plain
        def read_file(path: str) -> str:
            return binary

        @agent.tool_plain
        def write_file(path: str, text: str) -> str:
            return "written"

        async def scenario() -> list[ModelMessage]:
            result = await agent.run("read the core file, then write hello.py")
            await om.flush(30)
            return result.all_messages()

        history = asyncio.run(scenario())
        om.close()
        client.close()
        assert om.unsent == 0
    with Obsmem(load_settings(data_dir=data)) as service:
        stored = stored_events(service)
        with service.database("p").read() as conn:
            args = dict(conn.execute("SELECT seq, tool_args FROM events WHERE session_id = 's1'").fetchall())
    expected = history_events(history)
    assert [row[:3] for row in stored] == [row[:3] for row in expected]  # every event, the answer too
    by_seq = {row[0]: row for row in stored}
    read_seq = next(row[0] for row in expected if row[3] == binary)
    cut_output = by_seq[read_seq][3]
    assert cut_output.startswith("\x00" * 1000) and cut_output.endswith(" characters not stored]")
    assert len(json.dumps(cut_output, ensure_ascii=False).encode()) < body_limit
    write_seq = next(row[0] for row in expected if row[4] == "write_file" and row[2] == "tool_call")
    cut_args = json.loads(args[write_seq])  # stored as the arguments' JSON text, cut
    assert isinstance(cut_args, str) and cut_args.startswith('{"path":"hello.py","text":"print(')
    assert cut_args.endswith(" characters not stored]") and len(cut_args.encode()) < body_limit
    uncut = [row for row in expected if row[0] not in (read_seq, write_seq)]
    assert [by_seq[row[0]] for row in uncut] == uncut


FITTED_TEXTS = {
    "nul": "\x00" * 40_000,  # six bytes of JSON each
    "emoji": "\U0001f600" * 40_000,  # four bytes each
    "cjk-and-quotes": '漢字"\\\n' * 20_000,
    "mixed": "".join(chr(code) for code in range(0x2FF)) * 200,
}


@pytest.mark.parametrize("budget", [16 * 1024, 100_000])
@pytest.mark.parametrize("name", sorted(FITTED_TEXTS))
def test_an_event_is_cut_to_its_byte_budget_the_same_way_every_time(name: str, budget: int) -> None:
    text = FITTED_TEXTS[name]
    result = {"seq": 3, "role": "tool", "type": "tool_result", "content": text, "tool_name": "read_file"}
    call = {"seq": 2, "role": "assistant", "type": "tool_call", "tool_name": "write", "tool_args": {"text": text}}
    for event in (result, call):
        fitted = fit_event(event, budget)
        assert event_bytes(fitted) <= budget
        assert fitted == fit_event(dict(event), budget)  # sent again, the same event: a duplicate
        kept = fitted["content"] if event is result else fitted["tool_args"]
        assert kept.endswith(" characters not stored]")
        head = (
            text[:50]
            if event is result
            else json.dumps({"text": text[:50]}, ensure_ascii=False, separators=(",", ":"))[:-2]
        )
        assert kept.startswith(head)
    assert fit_event({"role": "user", "content": "short"}, budget) == {"role": "user", "content": "short"}


def test_a_secret_the_byte_cut_splits_is_redacted_whole() -> None:
    token = "ghp_" + "Ab3dEf7hIjKl9nOpQr5tUvWx1zA2b3C4d5E6"
    text = "\x00" * 3_000 + f" {token}" * 500  # the cut falls among the tokens
    fitted = fit_event({"role": "tool", "type": "tool_result", "content": text}, 32 * 1024)
    assert "ghp_" not in fitted["content"] and "Ab3dE" not in fitted["content"]
    assert "[REDACTED:github_token]" in fitted["content"]


def test_a_tool_call_with_arguments_larger_than_the_servers_body_limit_does_not_stop_the_session(
    tmp_path: Path,
) -> None:
    """A call writing a file of 9 MB: its arguments are cut as an event's content is, and it is stored, and so
    is everything after it. Sent whole, it was over the server's default body limit (8 MiB) at every retry,
    and no event of the session after it was ever stored."""
    text = "z" * 9_000_000

    def writer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(part, ToolReturnPart) for part in messages[-1].parts):
            return ModelResponse(parts=[TextPart("written")])
        return ModelResponse(parts=[ToolCallPart("write_file", {"path": "f", "text": text}, tool_call_id="c1")])

    data = tmp_path / "data"
    with live_server(data) as base:
        client = ObsmemClient(base)
        om = ObservationalMemory(client, project="p", session_id="s1", tools=False)
        agent = Agent(FunctionModel(writer), capabilities=[om])

        @agent.tool_plain
        def write_file(path: str, text: str) -> str:
            return "ok"

        async def scenario() -> list[ModelMessage]:
            first = await agent.run("write the file")
            second = await agent.run("and again", message_history=first.all_messages())
            await om.flush(5)
            return second.all_messages()

        history = asyncio.run(scenario())
        unsent = om.unsent
        om.close()
        client.close()
    with Obsmem(load_settings(data_dir=data)) as service:
        stored = stored_events(service)
        with service.database("p").read() as conn:
            args = [row[0] for row in conn.execute("SELECT tool_args FROM events WHERE type = 'tool_call'")]
    assert unsent == 0
    assert stored == history_events(history)
    assert len(args) == 2 and all(value.endswith('characters not stored]"') for value in args)
