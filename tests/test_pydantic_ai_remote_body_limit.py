"""A server whose ``server.max_body_bytes`` is lower than its client was told (docs/pydantic-ai.md, Construction).

The capability cuts each event to fit the client's ``max_body_bytes`` (8 MiB by default): a server configured
lower refused (413) every body between its limit and that, and the client took the refusal for an outage (it
saw a reset connection, ``service_unavailable``) and sent the same body again at every request, so nothing of
the session after it was ever stored. Now a 413 is the server's answer, not an outage: the client cuts what
it has not stored yet to fit the limit the answer names (half the size, from a server that names none), and
says so once in the log.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from obsmem.app import Obsmem
from obsmem.errors import ObsmemError
from obsmem.pydantic_ai import ObservationalMemory, ObsmemClient
from obsmem.pydantic_ai.backends import DEFAULT_MAX_BODY_BYTES, MIN_MAX_BODY_BYTES, RemoteMemory
from obsmem.settings import load_settings
from support.http_server import live_server
from support.pydantic_ai_runs import history_events, stored_events

pytestmark = pytest.mark.timeout(180)

SERVER_LIMIT = 100_000  # not a power of two: halving from 8 MiB would reach 65,536, below it
OUTPUT_MARK = "tool-output-line "  # the tool output's text: never in the log


def reader_agent(om: ObservationalMemory, output: str) -> Agent[None, str]:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(part, ToolReturnPart) for part in messages[-1].parts):
            return ModelResponse(parts=[TextPart("read it")])
        return ModelResponse(parts=[ToolCallPart("read_file", {"path": "big.log"}, tool_call_id="c1")])

    agent = Agent(FunctionModel(model), capabilities=[om])

    @agent.tool_plain
    def read_file(path: str) -> str:
        return output

    return agent


def test_a_server_limit_lower_than_the_clients_is_met_by_cutting_events_smaller(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    output = OUTPUT_MARK * (300_000 // len(OUTPUT_MARK))  # about 300 KB: under the client's budget, over the server's
    data = tmp_path / "data"
    with live_server(data, max_body_bytes=SERVER_LIMIT) as base:
        client = ObsmemClient(base)  # told nothing: the default 8 MiB
        om = ObservationalMemory(client, project="p", session_id="s1", tools=False)
        agent = reader_agent(om, output)

        async def scenario() -> list[ModelMessage]:
            first = await agent.run("read the log")
            second = await agent.run("read it again", message_history=first.all_messages())
            await om.flush(30)
            return second.all_messages()

        with caplog.at_level(logging.WARNING, logger="obsmem.pydantic_ai"):
            history = asyncio.run(scenario())
            om.close()
        client.close()
        unsent, budget = om.unsent, client.body_budget
    assert unsent == 0
    assert budget == SERVER_LIMIT and client.max_body_bytes == DEFAULT_MAX_BODY_BYTES  # the limit the 413 named
    with Obsmem(load_settings(data_dir=data)) as service:
        stored = stored_events(service)
    expected = history_events(history)
    assert [row[:3] for row in stored] == [row[:3] for row in expected]  # every event, after the cut ones too
    cut = [row for row in stored if row[3] != expected[row[0] - 1][3]]
    assert len(cut) == 2  # the two large tool outputs, cut to fit the smaller body
    assert all(row[3].startswith(OUTPUT_MARK) and row[3].endswith(" characters not stored]") for row in cut)
    warnings = [record for record in caplog.records if record.levelno >= logging.WARNING]
    lowered = [record for record in warnings if "lower than" in record.getMessage()]
    assert len(lowered) == 1, [record.getMessage() for record in warnings]  # once, not per request
    assert "payload_too_large" in lowered[0].getMessage()
    assert not [record for record in warnings if "unsent" in record.getMessage()]
    assert not any(OUTPUT_MARK in record.getMessage() for record in caplog.records)


def test_an_event_stored_whole_before_a_413_is_sent_again_whole(tmp_path: Path) -> None:
    """An event between half the server's limit and the limit went whole before the first 413; a later 413 set
    the budget to the limit the server named, so the same event sent again (a history checked again) is still
    whole and a duplicate. Halving the budget instead (8 MiB down to 65,536 here) cut it, and the server refused
    the cut copy as a seq_conflict."""
    middle = {"seq": 1, "role": "tool", "type": "tool_result", "content": "m" * 70_000, "tool_name": "read_file"}
    large = {"seq": 2, "role": "tool", "type": "tool_result", "content": "l" * 300_000, "tool_name": "read_file"}
    with live_server(tmp_path / "data", max_body_bytes=SERVER_LIMIT) as base:
        client = ObsmemClient(base)
        try:
            memory = RemoteMemory(client, "p", "s1")
            memory.append([middle])  # whole: under the server's limit
            memory.append([large])  # a 413, then cut to fit the limit the answer named
            assert client.body_budget == SERVER_LIMIT
            RemoteMemory(client, "p", "s1").append([middle, large])  # both duplicates, no seq_conflict
        finally:
            client.close()
    with Obsmem(load_settings(data_dir=tmp_path / "data")) as service:
        stored = stored_events(service)
    assert [(row[0], len(row[3])) for row in stored][0] == (1, 70_000)
    assert len(stored) == 2 and stored[1][3].endswith(" characters not stored]")


def test_a_413_at_the_smallest_body_is_a_refusal_not_an_outage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Below the smallest body the client cuts events to (16 KiB) the refusal is final: it is raised with the
    server's code, and close() does not spend its timeout sending the same body again."""
    event = {"role": "tool", "type": "tool_result", "content": OUTPUT_MARK * 4000, "tool_name": "read_file"}
    with live_server(tmp_path / "data", max_body_bytes=4096) as base:
        client = ObsmemClient(base)
        try:
            with pytest.raises(ObsmemError) as refused:
                RemoteMemory(client, "p", "s1").append([event])
            assert (refused.value.code, refused.value.status) == ("payload_too_large", 413)
            assert client.body_budget == MIN_MAX_BODY_BYTES

            om = ObservationalMemory(client, project="p", session_id="s2", tools=False)
            with caplog.at_level(logging.WARNING, logger="obsmem.pydantic_ai"):
                history = asyncio.run(reader_agent(om, OUTPUT_MARK * 4000).run("read the log")).all_messages()
                attempts = []
                real_append = om.backend.append

                def counted(*args: object, **kwargs: object) -> None:
                    attempts.append(1)
                    real_append(*args, **kwargs)  # type: ignore[arg-type]

                om.backend.append = counted  # type: ignore[method-assign]
                om.close(10)
        finally:
            client.close()
    assert len(attempts) == 1  # one attempt, not five spread over the timeout
    assert 0 < om.unsent <= len(history_events(history))
    unsent = [record.getMessage() for record in caplog.records if "unsent" in record.getMessage()]
    assert len(unsent) == 1 and "(payload_too_large)" in unsent[0]
    assert not any(OUTPUT_MARK in record.getMessage() for record in caplog.records)
