"""The pipeline over HTTP: memory projection, status, observe, the event log as a list and as SSE, and
appends that return promptly while the Observer's model is slow (a real server on loopback)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient

from obsmem.app import Obsmem
from obsmem.surfaces.http import create_app
from support.http_server import LOCAL
from support.pipeline_service import pipeline_options, pipeline_service, user, words
from support.scripted_chat import HeldReplies, ObserverScript, ScriptedChatServer


@pytest.fixture
def service_options(server: ScriptedChatServer) -> dict[str, Any]:
    return pipeline_options(server)


def append(client: TestClient | httpx.Client, session: str, *texts: str) -> httpx.Response:
    return client.post(f"/v1/projects/p/sessions/{session}/events", json={"events": [user(t) for t in texts]})


def wait_for(condition, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_memory_is_empty_then_rendered_instantly(client: TestClient, service: Obsmem) -> None:
    assert append(client, "s1", "hello").status_code == 200
    empty = client.get("/v1/projects/p/sessions/s1/memory")
    assert empty.status_code == 200
    assert empty.json() == {
        "session_id": "s1",
        "empty": True,
        "reflections": 0,
        "observations": 0,
        "generation": 0,
        "observed_through_seq": 0,
        "tokens": 0,
        "text": "",
        "untrusted_notes": [],
    }
    append(client, "s1", *(f"message {i}: " + words(60) for i in range(4)))
    wait_for(lambda: service.session_status("p", "s1").pending_tokens == 0)  # the server's own workers
    body = client.get("/v1/projects/p/sessions/s1/memory").json()
    assert not body["empty"] and body["observations"] == 5 and body["text"].startswith("<obsmem-memory")
    assert body["observed_through_seq"] == 5  # the cut an agent makes: every event the text covers
    text = client.get("/v1/projects/p/sessions/s1/memory", params={"format": "text"})
    assert text.headers["content-type"].startswith("text/plain") and text.text == body["text"]
    assert text.headers["x-obsmem-empty"] == "false"


def test_status_fields_and_errors(client: TestClient) -> None:
    append(client, "s1", "hello")
    status = client.get("/v1/projects/p/sessions/s1/status")
    assert status.status_code == 200
    body = status.json()
    assert body["status"] == "idle" and body["threshold"] == 100 and body["observer"] == "enabled"
    assert {
        "pending_tokens",
        "threshold_percent",
        "observation_tokens",
        "reflection_threshold",
        "generation_count",
        "current_activity",
        "last_error",
    } <= set(body)
    assert client.get("/v1/projects/p/sessions/nope/status").json()["error"]["code"] == "session_not_found"
    assert client.get("/v1/projects/nope/sessions/s1/status").status_code == 404
    bad = client.get("/v1/projects/p/sessions/bad%20id/status")
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_session"


def test_observe_queues_and_without_a_model_is_409(client: TestClient, tmp_path: Path) -> None:
    append(client, "s1", "short")
    first = client.post("/v1/projects/p/sessions/s1/observe")
    assert first.status_code == 202 and set(first.json()) == {"job_id", "queued"}
    unknown = client.post("/v1/projects/p/sessions/never-seen/observe")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "session_not_found"
    plain = Obsmem(data_dir=tmp_path / "plain")
    with TestClient(create_app(plain), base_url=LOCAL) as other:
        append(other, "s1", "short")
        refused = other.post("/v1/projects/p/sessions/s1/observe")
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "observation_off"
    plain.close()


def test_event_log_pages_and_filters(client: TestClient, service: Obsmem) -> None:
    append(client, "s1", *(words(80) for _ in range(3)))
    wait_for(lambda: len(service.pipeline_events("p")) >= 2)
    page = client.get("/v1/projects/p/events").json()
    assert [e["type"] for e in page["events"]] == ["om_observation_start", "om_observation_end"]
    assert page["last_id"] == page["events"][-1]["id"]
    rest = client.get("/v1/projects/p/events", params={"after_id": page["events"][0]["id"]}).json()
    assert [e["type"] for e in rest["events"]] == ["om_observation_end"]
    only = client.get("/v1/projects/p/events", params={"type": "om_observation_end"}).json()["events"]
    assert len(only) == 1 and only[0]["observations"] == 3
    assert client.get("/v1/projects/p/events", params={"session_id": "other"}).json() == {"events": [], "last_id": 0}
    assert client.get("/v1/projects/p/events", params={"type": "bogus"}).status_code == 422
    assert client.get("/v1/projects/p/events", params={"limit": 0}).status_code == 422
    assert client.get("/v1/projects/nope/events").status_code == 404


@pytest.mark.parametrize("cursor", ["9223372036854775808", "9" * 30, "9" * 5000, "-1", "x"])
def test_event_cursors_beyond_any_event_id_are_422_not_500(client: TestClient, cursor: str) -> None:
    append(client, "s1", "hello")
    listed = client.get("/v1/projects/p/events", params={"after_id": cursor})
    assert listed.status_code == 422 and listed.json()["error"]["field"] == "after_id"
    headers = {"Accept": "text/event-stream", "Last-Event-ID": cursor}
    with client.stream("GET", "/v1/projects/p/events", headers=headers) as streamed:
        assert streamed.status_code == 422
        assert json.loads(streamed.read())["error"]["field"] == "Last-Event-ID"
    biggest = client.get("/v1/projects/p/events", params={"after_id": 2**63 - 1})
    assert biggest.status_code == 200 and biggest.json()["events"] == []


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[str, Obsmem, ScriptedChatServer]]:
    """A real uvicorn server on loopback (workers in its process), with a slow scripted model."""
    model = ScriptedChatServer(ObserverScript(delay=2.0)).start()
    service = pipeline_service(tmp_path / "live", model, observer={"buffer_tokens": 200})
    config = uvicorn.Config(create_app(service), host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, timeout=20)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}", service, model
    server.should_exit = True
    thread.join(timeout=20)
    service.close()
    model.stop()


def test_http_appends_are_stored_while_the_model_has_not_answered(
    live: tuple[str, Obsmem, ScriptedChatServer],
) -> None:
    base, service, model = live
    held = HeldReplies(ObserverScript())
    model.responder = held
    try:
        with httpx.Client(base_url=base, timeout=10) as http:
            append(http, "s1", words(300))
            wait_for(lambda: http.get("/v1/projects/p/sessions/s1/status").json()["status"] == "observing")
            wait_for(lambda: len(model.requests) >= 1)  # the observer's call is at the model, held there
            for n in range(30):
                # An append that waited for the model would wait until the release below: the client's 10 s
                # timeout would fail it.
                response = append(http, f"s{n % 2 + 1}", f"turn {n}: " + words(150))
                assert response.status_code == 200 and response.json()["appended"] == 1
            assert held.answered == 0  # every append above was stored while the model had not answered
            assert http.get("/v1/projects/p/sessions/s1/status").json()["status"] == "observing"
    finally:
        held.released.set()


def test_event_stream_delivers_cycles_and_resumes(live: tuple[str, Obsmem, ScriptedChatServer]) -> None:
    base, service, model = live
    model.responder = ObserverScript()
    received: list[dict[str, object]] = []
    with httpx.Client(base_url=base, timeout=30) as http:
        with http.stream("GET", "/v1/projects/p/events", headers={"Accept": "text/event-stream"}) as stream:
            assert stream.status_code == 404  # no project yet: an error, not an empty stream
        append(http, "s1", words(300))
        with http.stream("GET", "/v1/projects/p/events", headers={"Accept": "text/event-stream"}) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            event: dict[str, object] = {}
            for line in stream.iter_lines():
                if line.startswith("id: "):
                    event["id"] = int(line[4:])
                elif line.startswith("event: "):
                    event["event"] = line[7:]
                elif line.startswith("data: "):
                    event["data"] = json.loads(line[6:])
                elif not line and event:
                    received.append(event)
                    event = {}
                    if received[-1]["event"] == "om_observation_end":
                        break
        assert [e["event"] for e in received] == ["om_observation_start", "om_observation_end"]
        assert received[0]["data"]["cycle_id"] == received[1]["data"]["cycle_id"]  # type: ignore[index]
        headers = {"Accept": "text/event-stream", "Last-Event-ID": str(received[0]["id"])}
        with http.stream("GET", "/v1/projects/p/events", headers=headers) as stream:
            for line in stream.iter_lines():
                if line.startswith("id: "):
                    assert int(line[4:]) == received[1]["id"]  # resumes after the last id seen
                    break
