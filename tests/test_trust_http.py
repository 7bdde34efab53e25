"""Notes, judgments and groom over HTTP and the agent tools, with the user tier following an API key's owner
across its projects and never reaching another key's."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastapi.testclient import TestClient
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from obsmem.app import Obsmem
from obsmem.settings import load_settings
from obsmem.surfaces.http import create_app
from obsmem.surfaces.tools import TOOL_NAMES, run_tool, tool_definitions
from support.http_server import LOCAL

ALICE = "alice-key-0123456789abcdef"
BOB = "bob-key-0123456789abcdefgh"
NOBODY = "nobody-key-0123456789abcdef"
KEYS = [
    {"name": "alice laptop", "owner": "alice", "key": ALICE, "projects": ["one", "two"]},
    {"name": "bob", "key": BOB, "projects": ["three"]},
    {"name": "Shared Key", "key": NOBODY, "projects": ["one"]},
]


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[tuple[Obsmem, TestClient]]:
    settings = load_settings(data_dir=tmp_path / "data", api_keys=KEYS, trust={"judge": {"provider": "human"}})
    with Obsmem(settings) as service, TestClient(create_app(service), base_url=LOCAL) as client:
        for project in ("one", "two", "three"):
            service.append_events(project, "s1", [{"role": "user", "content": "hello"}])
        yield service, client


def _as(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _search(client: TestClient, key: str, project: str, query: str, trust: str = "all") -> list[dict[str, Any]]:
    answer = client.post(f"/v1/projects/{project}/search", json={"query": query, "trust": trust}, headers=_as(key))
    assert answer.status_code == 200, answer.text
    return answer.json()["hits"]


def test_the_user_tier_follows_the_keys_owner_and_no_one_else(keyed: tuple[Obsmem, TestClient]) -> None:
    service, client = keyed
    saved = client.post(
        "/v1/projects/one/notes",
        json={"action": "save", "content": "alice prefers tabs", "tier": "user"},
        headers=_as(ALICE),
    )
    assert saved.status_code == 200, saved.text
    body = saved.json()
    assert body["trusted"] is False and body["status"] == "candidate" and body["tier"] == "user"
    assert [hit["id"] for hit in _search(client, ALICE, "two", "tabs")] == [body["id"]]  # another project of alice
    assert _search(client, ALICE, "two", "tabs", trust="trusted") == []  # candidates only with trust: all
    assert _search(client, BOB, "three", "tabs") == []  # bob's projects never see alice's tier
    assert client.get("/v1/projects/three/notes", headers=_as(BOB)).json() == {"notes": [], "truncated": False}
    # Resolve and groom from alice's second project: now trusted everywhere alice searches.
    service.trust.dispatcher.flush()
    service.worker_pool().drain(20)
    [judgment] = client.get("/v1/projects/two/judgments?state=escalated", headers=_as(ALICE)).json()["judgments"]
    assert judgment["note_id"] == body["id"] and judgment["decision"] == "escalate"
    # The judgment is in the project's event log, and that type is one the log's filter takes.
    logged = client.get("/v1/projects/two/events", params={"type": "trust_judgment"}, headers=_as(ALICE))
    assert [event["type"] for event in logged.json()["events"]] == ["trust_judgment"], logged.text
    assert client.get("/v1/projects/two/events", params={"type": "om_x"}, headers=_as(ALICE)).status_code == 422
    resolved = client.post(
        f"/v1/projects/two/judgments/{judgment['judgment_id']}/resolve", json={"outcome": True}, headers=_as(ALICE)
    )
    assert resolved.status_code == 200 and resolved.json()["state"] == "resolved"
    groomed = client.post("/v1/projects/two/groom", headers=_as(ALICE)).json()
    assert [item["id"] for item in groomed["promoted"]] == [body["id"]]
    assert [hit["trusted"] for hit in _search(client, ALICE, "one", "tabs", trust="trusted")] == [True]
    assert _search(client, BOB, "three", "tabs") == []
    # Saving the trusted note's text again writes nothing and says so, without contradicting trusted: false.
    again = client.post(
        "/v1/projects/one/notes",
        json={"action": "save", "content": "alice prefers tabs", "tier": "user"},
        headers=_as(ALICE),
    )
    assert again.status_code == 200, again.text
    assert {key: again.json()[key] for key in ("id", "trusted", "status", "note_status", "duplicate")} == {
        "id": body["id"],
        "trusted": False,
        "status": "unchanged",
        "note_status": "trusted",
        "duplicate": True,
    }
    # A key with no owner has no user tier: its user-tier writes are refused and it sees none.
    refused = client.post(
        "/v1/projects/one/notes", json={"action": "save", "content": "x", "tier": "user"}, headers=_as(NOBODY)
    )
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "user_tier_unavailable"
    assert _search(client, NOBODY, "one", "tabs") == []


def test_note_routes_and_their_errors(keyed: tuple[Obsmem, TestClient]) -> None:
    _, client = keyed
    headers = _as(ALICE)
    note = client.post("/v1/projects/one/notes", json={"action": "save", "content": "use make ship"}, headers=headers)
    note_id = note.json()["id"]
    update = client.put(f"/v1/projects/one/notes/{note_id}", json={"content": "use make release"}, headers=headers)
    assert update.status_code == 200 and update.json()["supersedes"] == note_id and update.json()["trusted"] is False
    listed = client.get("/v1/projects/one/notes?status=candidate", headers=headers).json()["notes"]
    assert sorted(item["content"] for item in listed) == ["use make release", "use make ship"]
    gone = client.delete(f"/v1/projects/one/notes/{note_id}", headers=headers)
    assert gone.status_code == 200 and gone.json()["status"] == "forgotten"
    conflict = client.put(f"/v1/projects/one/notes/{note_id}", json={"content": "again"}, headers=headers)
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "note_forgotten"
    for method, path, body in [
        ("post", "/v1/projects/one/notes", {"action": "save", "content": ""}),
        ("post", "/v1/projects/one/notes", {"action": "save", "content": "x", "tier": "team"}),
        ("post", "/v1/projects/one/notes", {"action": "drop", "content": "x"}),
        ("post", "/v1/projects/one/notes", {"action": "save", "content": "two\nlines"}),
        ("put", "/v1/projects/one/notes/nothex", {"content": "x"}),
        ("post", "/v1/projects/one/judgments/j0000000000000000/resolve", {"outcome": "yes"}),
        ("post", "/v1/projects/one/search", {"query": "x", "trust": "some"}),
    ]:
        answer = client.request(method, path, json=body, headers=headers)
        assert answer.status_code == 422, (path, body, answer.text)
    missing = client.delete("/v1/projects/one/notes/" + "0" * 12, headers=headers)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    unknown = client.post(
        "/v1/projects/one/judgments/j0000000000000000/resolve", json={"outcome": True}, headers=headers
    )
    assert unknown.status_code == 404
    assert client.get("/v1/projects/one/judgments?state=maybe", headers=headers).status_code == 422
    assert client.post("/v1/projects/three/groom", headers=headers).status_code == 404  # not alice's project


def test_a_resolution_is_never_rewritten(keyed: tuple[Obsmem, TestClient]) -> None:
    service, client = keyed
    service.save_note("one", "a fact to judge", user="alice")
    service.search("one", "fact", user="alice")
    service.trust.dispatcher.flush()
    service.worker_pool().drain(20)
    [judgment] = service.judgments("one", user="alice").judgments
    path = f"/v1/projects/one/judgments/{judgment.judgment_id}/resolve"
    assert client.post(path, json={"outcome": False}, headers=_as(ALICE)).status_code == 200
    assert client.post(path, json={"outcome": False}, headers=_as(ALICE)).status_code == 200  # same answer: no-op
    again = client.post(path, json={"outcome": True}, headers=_as(ALICE))
    assert again.status_code == 409 and again.json()["error"]["code"] == "judgment_resolved"


def test_the_memory_tool_saves_updates_and_forgets(tmp_path: Path) -> None:
    with Obsmem(load_settings(data_dir=tmp_path / "data")) as service:
        assert "memory" in TOOL_NAMES
        definition = next(d for d in tool_definitions("exact") if d["function"]["name"] == "memory")
        assert definition["function"]["parameters"]["required"] == ["action"]
        saved = run_tool(service, "app", "memory", {"action": "save", "content": "cache in /tmp/c", "tier": "project"})
        assert saved.result is not None and saved.result["trusted"] is False
        updated = run_tool(
            service, "app", "memory", {"action": "update", "id": saved.result["id"], "content": "cache in /var/c"}
        )
        assert updated.result is not None and updated.result["supersedes"] == saved.result["id"]
        forgotten = run_tool(service, "app", "memory", {"action": "forget", "id": saved.result["id"]})
        assert forgotten.result is not None and forgotten.result["status"] == "forgotten"
        for arguments, code in [
            ({"action": "remember", "content": "x"}, "invalid_arguments"),
            ({"action": "forget"}, "invalid_arguments"),
            ({"action": "save", "content": "x", "id": saved.result["id"]}, "invalid_arguments"),
            ({"action": "save", "content": "x", "colour": "red"}, "invalid_arguments"),
            ({"action": "save"}, "invalid_request"),
            ({"action": "update", "id": "f" * 12, "content": "x"}, "not_found"),
        ]:
            outcome = run_tool(service, "app", "memory", arguments)
            assert outcome.is_error and outcome.text.startswith(f"{code}: "), (arguments, outcome.text)
        hits = run_tool(service, "app", "memory_search", {"query": "cache", "trust": "all"}).result
        assert hits is not None and [hit["content"] for hit in hits["hits"]] == ["cache in /var/c"]


def test_mcp_offers_the_memory_tool_as_the_one_that_writes(tmp_path: Path) -> None:
    with Obsmem(load_settings(data_dir=tmp_path / "data")) as service:
        service.append_events("alpha", "s1", [{"role": "user", "content": "hello"}])
    parameters = StdioServerParameters(
        command=sys.executable,
        args=["-m", "obsmem.surfaces.mcp_server", "--data-dir", str(tmp_path / "data"), "--project", "alpha"],
        env={"HF_HUB_OFFLINE": "1", "XDG_DATA_HOME": str(tmp_path / "xdg")},
        cwd=str(tmp_path),
    )

    async def scenario() -> None:
        with anyio.fail_after(60):
            async with Client(parameters) as client:
                tools = {tool.name: tool for tool in (await client.list_tools()).tools}
                assert tools["memory"].annotations.read_only_hint is False
                assert tools["memory_search"].annotations.read_only_hint is True
                saved = await client.call_tool("memory", {"action": "save", "content": "lint with ruff"})
                assert not saved.is_error and json.loads(saved.content[0].text)["trusted"] is False
                found = await client.call_tool("memory_search", {"query": "ruff", "trust": "all"})
                assert [hit["trusted"] for hit in json.loads(found.content[0].text)["hits"]] == [False]

    anyio.run(scenario)


def test_a_user_tier_note_for_a_project_that_does_not_exist_is_not_found(client: TestClient) -> None:
    saved = client.post("/v1/projects/ghost/notes", json={"action": "save", "content": "a fact", "tier": "user"})
    assert saved.status_code == 404 and saved.json()["error"]["code"] == "project_not_found"
    listed = client.get("/v1/projects/ghost/notes")  # what a read of the same project answers
    assert listed.status_code == 404 and listed.json()["error"]["code"] == "project_not_found"
    client.post("/v1/projects/real/notes", json={"action": "save", "content": "a project fact"})
    assert [note["content"] for note in client.get("/v1/projects/real/notes").json()["notes"]] == ["a project fact"]


def test_note_and_judgment_listings_take_a_limit(client: TestClient) -> None:
    for n in range(3):
        client.post("/v1/projects/app/notes", json={"action": "save", "content": f"fact number {n}"})
    cut = client.get("/v1/projects/app/notes", params={"limit": 2}).json()
    assert len(cut["notes"]) == 2 and cut["truncated"] is True
    assert client.get("/v1/projects/app/notes").json()["truncated"] is False
    bad = client.get("/v1/projects/app/judgments", params={"limit": 501})
    assert bad.status_code == 422
    for route in ("notes", "judgments"):  # only plain decimal digits, as every other listing
        for written in ("1_0", "+2", " 3", "1.0"):
            refused = client.get(f"/v1/projects/app/{route}", params={"limit": written})
            assert refused.status_code == 422 and refused.json()["error"]["field"] == "limit", (route, written)
    assert client.get("/v1/projects/app/judgments", params={"limit": 1}).json() == {"judgments": [], "truncated": False}
