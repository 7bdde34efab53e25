"""Conversation search on every surface: the scope reaches the search, a bad scope gets ``invalid_scope``,
and recall of an event id returns the event with its neighbours and the observations citing it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from obsmem.app import Obsmem, RecalledEvent
from obsmem.ids import event_id
from obsmem.surfaces.cli import cli
from obsmem.surfaces.tools import execute_tool
from support.http_server import ALPHA_NOTES, seed, settings_for

NEEDLE = "maptoolarguments"


@pytest.fixture
def seeded(service: Obsmem) -> Obsmem:
    seed(service, "alpha", ALPHA_NOTES)  # events "event for: <note>" in s1, one observation citing each
    return service


def _kinds(result: dict) -> list[str]:  # type: ignore[type-arg]
    return [hit["kind"] for hit in result["hits"]]


def test_python_recall_of_an_event_brings_neighbours_and_citing_observations(seeded: Obsmem) -> None:
    hits = seeded.search("alpha", "snake_case", scope="conversation").hits
    assert [(hit.kind, hit.seq) for hit in hits] == [("event", 5)]
    recalled = seeded.recall("alpha", hits[0].id)
    assert isinstance(recalled, RecalledEvent)
    body = recalled.to_dict()
    assert body["event"]["seq"] == 5 and body["event"]["event_id"] == event_id("s1", 5)
    assert body["event"]["content"] == f"event for: {ALPHA_NOTES[4][2]}"
    assert [item["seq"] for item in body["before"]] == [2, 3, 4]  # search.recall_neighbours = 3
    assert [item["seq"] for item in body["after"]] == [6, 7, 8]
    assert [hit["content"] for hit in body["cited_by"]] == [ALPHA_NOTES[4][2]]
    # The first event has nothing before it; a memory id still recalls the memory.
    first = seeded.recall("alpha", event_id("s1", 1)).to_dict()
    assert first["before"] == [] and [item["seq"] for item in first["after"]] == [2, 3, 4]
    memory_hit = seeded.search("alpha", "snake_case").hits[0]
    assert seeded.recall("alpha", memory_hit.id).to_dict()["memory"]["memory_id"] == memory_hit.memory_id


def test_the_recall_window_is_a_setting(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    settings = settings.model_copy(update={"search": settings.search.model_copy(update={"recall_neighbours": 1})})
    with Obsmem(settings) as service:
        seed(service, "alpha", ALPHA_NOTES)
        body = service.recall("alpha", event_id("s1", 4)[:12]).to_dict()
    assert [item["seq"] for item in body["before"]] == [3] and [item["seq"] for item in body["after"]] == [5]


def test_forget_refuses_an_event_id(seeded: Obsmem) -> None:
    from obsmem.errors import NotFound

    with pytest.raises(NotFound) as caught:
        seeded.forget("alpha", event_id("s1", 1))
    assert "conversation event" in caught.value.message


def test_http_scope_event_hits_recall_and_bad_scope(client: TestClient, seeded: Obsmem) -> None:
    url = "/v1/projects/alpha/search"
    memories = client.post(url, json={"query": NEEDLE})
    assert memories.status_code == 200 and _kinds(memories.json()) == ["observation", "observation"]
    events = client.post(url, json={"query": NEEDLE, "scope": "conversation"})
    assert events.status_code == 200 and _kinds(events.json()) == ["event", "event"]
    hit = events.json()["hits"][0]
    assert {key: hit[key] for key in ("session_id", "seq", "role", "type")} == {
        "session_id": "s1",
        "seq": 8,
        "role": "user",
        "type": "message",
    }
    both = client.post(url, json={"query": NEEDLE, "scope": "all"}).json()
    assert sorted(_kinds(both)) == ["event", "event", "observation", "observation"]

    recalled = client.get(f"/v1/projects/alpha/memories/{hit['id']}")
    assert recalled.status_code == 200
    body = recalled.json()
    assert body["event"]["seq"] == 8 and [item["seq"] for item in body["before"]] == [5, 6, 7]
    assert body["after"] == [] and body["cited_by"][0]["content"] == ALPHA_NOTES[7][2]

    for bad in ("events", 1, None, ["all"]):
        payload: dict = {"query": NEEDLE, "scope": bad}  # type: ignore[type-arg]
        if bad is None:
            continue  # null is the default scope
        refused = client.post(url, json=payload)
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["code"] == "invalid_scope" and error["field"] == "scope"
        assert "events" not in error["message"]  # the value sent is never echoed


def test_cli_scope_option_and_event_recall(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with Obsmem(settings_for(tmp_path)) as service:
        seed(service, "alpha", ALPHA_NOTES)
    runner = CliRunner()

    def run(*args: str):  # type: ignore[no-untyped-def]
        return runner.invoke(cli, ["--data-dir", str(data_dir), *args], catch_exceptions=False)

    found = run("search", "alpha", NEEDLE, "--scope", "conversation", "--json")
    assert found.exit_code == 0, found.output
    result = json.loads(found.stdout)
    assert _kinds(result) == ["event", "event"] and [hit["seq"] for hit in result["hits"]] == [8, 1]
    table = run("search", "alpha", NEEDLE, "--scope", "all")
    assert table.exit_code == 0 and "s1 #8" in table.stdout and "user message" in table.stdout
    recalled = run("recall", "alpha", result["hits"][0]["id"])
    assert recalled.exit_code == 0, recalled.output
    assert "Events around it (3)" in recalled.stdout and "Observations citing it (1)" in recalled.stdout
    refused = run("search", "alpha", NEEDLE, "--scope", "events")
    assert refused.exit_code == 2 and "--scope" in refused.stderr


def test_agent_tool_scope_and_bad_scope(seeded: Obsmem) -> None:
    found = json.loads(execute_tool(seeded, "alpha", "memory_search", {"query": NEEDLE, "scope": "conversation"}))
    assert _kinds(found) == ["event", "event"]
    default = json.loads(execute_tool(seeded, "alpha", "memory_search", {"query": NEEDLE}))
    assert _kinds(default) == ["observation", "observation"]  # the agent tools' default stays memories
    recalled = json.loads(execute_tool(seeded, "alpha", "recall", {"id": found["hits"][1]["id"]}))
    assert recalled["event"]["seq"] == 1 and recalled["before"] == []
    text = execute_tool(seeded, "alpha", "memory_search", {"query": NEEDLE, "scope": "transcripts"})
    assert text.startswith("invalid_scope: ") and "transcripts" not in text


def test_mcp_scope_reaches_the_search(tmp_path: Path) -> None:
    with Obsmem(settings_for(tmp_path)) as service:
        seed(service, "alpha", ALPHA_NOTES)
    data_dir = tmp_path / "data"
    args = ["-m", "obsmem.surfaces.mcp_server", "--data-dir", str(data_dir), "--project", "alpha"]
    params = StdioServerParameters(command=sys.executable, args=args, env={"HF_HUB_OFFLINE": "1"}, cwd=str(data_dir))

    async def scenario() -> None:
        with anyio.fail_after(60):
            async with Client(params) as client:
                listed = {tool.name: tool for tool in (await client.list_tools()).tools}
                assert listed["memory_search"].input_schema["properties"]["scope"]["enum"] == [
                    "memories",
                    "conversation",
                    "all",
                ]
                found = await client.call_tool("memory_search", {"query": NEEDLE, "scope": "conversation"})
                assert not found.is_error
                assert _kinds(json.loads(found.content[0].text)) == ["event", "event"]
                bad = await client.call_tool("memory_search", {"query": NEEDLE, "scope": "nope"})
                assert bad.is_error and bad.content[0].text.startswith("invalid_scope: ")

    anyio.run(scenario)
