"""Switching the pipeline's models at run time (HTTP and CLI), the pipeline II routes, and the CLI views."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from fastapi.testclient import TestClient

from obsmem.app import Obsmem
from obsmem.errors import ObservationOff, ReflectionOff
from obsmem.surfaces.cli import cli
from obsmem.surfaces.http import create_app
from support.http_server import LOCAL
from support.pipeline_service import SMALL_REFLECTION, pipeline_options, user, words
from support.scripted_chat import PipelineScript, ScriptedChatServer


@pytest.fixture
def script() -> PipelineScript:
    return PipelineScript()


@pytest.fixture
def service_options(server: ScriptedChatServer) -> dict[str, Any]:
    return pipeline_options(server, **SMALL_REFLECTION)


def fill(service: Obsmem, session: str = "s1", n: int = 20) -> None:
    service.append_events("p", session, [user(f"message {i}: " + words(30)) for i in range(n)])


def test_switching_a_role_changes_the_model_of_its_next_job(
    client: TestClient, service: Obsmem, script: PipelineScript
) -> None:
    service.append_events("p", "s1", [user("hello")])
    shown = client.get("/v1/projects/p/models").json()["models"]
    assert shown["reflector"] == {
        "model_id": "scripted",
        "context_window_tokens": 32768,
        "source": "settings",
        "updated_at": None,
    }
    switched = client.put(
        "/v1/projects/p/models",
        json={
            "reflector": {"model_id": "big-reflector", "context_window_tokens": 65536},
            "dropper": {"model_id": "m/d:1"},
        },
    )
    assert switched.status_code == 200
    body = switched.json()
    assert body["changed"] == ["reflector", "dropper"]
    assert (
        body["models"]["reflector"]["model_id"] == "big-reflector"
        and body["models"]["reflector"]["source"] == "override"
    )
    assert body["models"]["reflector"]["context_window_tokens"] == 65536
    assert body["models"]["observer"]["source"] == "settings"
    again = client.put(
        "/v1/projects/p/models", json={"reflector": {"model_id": "big-reflector", "context_window_tokens": 65536}}
    )
    assert again.json()["changed"] == []  # already so: nothing logged
    fill(service)
    assert service.worker_pool().drain(60)
    used = {(tool, model) for tool, model in script.models}
    assert used == {
        ("record_observations", "scripted"),
        ("record_reflections", "big-reflector"),
        ("drop_observations", "m/d:1"),
    }
    logged = service.pipeline_events("p", types=("om_model_changed",))
    assert [(e.data["role"], e.data["previous_model_id"], e.data["model_id"]) for e in logged] == [
        ("reflector", "scripted", "big-reflector"),
        ("dropper", "scripted", "m/d:1"),
    ]
    reset = client.put("/v1/projects/p/models", json={"reflector": None})
    assert reset.json()["models"]["reflector"] == shown["reflector"] and reset.json()["changed"] == ["reflector"]


@pytest.mark.parametrize(
    "body",
    [
        {},
        [],
        {"reflector": {"model_id": ""}},
        {"reflector": {"model_id": "has space"}},
        {"reflector": {"model_id": "x" * 201}},
        {"reflector": {"model_id": "-leading-dash"}},
        {"reflector": {"model_id": "ok", "base_url": "http://elsewhere"}},
        {"reflector": {"model_id": "ok", "context_window_tokens": 100}},
        {"reflector": {"model_id": "ok", "context_window_tokens": "65536"}},
        {"reflector": "a-string"},
        {"judge": {"model_id": "ok"}},
        {"reflector": {"model_id": 5}},
    ],
)
def test_bad_model_bodies_are_422_and_change_nothing(client: TestClient, service: Obsmem, body: Any) -> None:
    service.append_events("p", "s1", [user("hello")])
    response = client.put("/v1/projects/p/models", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "invalid_request"
    assert "http://elsewhere" not in response.text
    assert all(role["source"] == "settings" for role in client.get("/v1/projects/p/models").json()["models"].values())
    assert service.pipeline_events("p", types=("om_model_changed",)) == []


def test_a_model_id_that_looks_like_a_secret_is_refused_naming_the_field(client: TestClient, service: Obsmem) -> None:
    key = "sk-proj-Xq7Lm2Pz9Rt4Vb6Nc8Kd1Fg3Hj5"
    service.append_events("p", "s1", [user("hello")])
    response = client.put("/v1/projects/p/models", json={"observer": {"model_id": key}})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and error["field"] == "observer.model_id"
    assert "secret" in error["message"] and key not in response.text
    assert client.get("/v1/projects/p/models").json()["models"]["observer"]["source"] == "settings"
    assert key not in client.get("/v1/projects/p/models").text
    assert service.pipeline_events("p", types=("om_model_changed",)) == []


def test_a_wrong_method_lists_every_method_of_the_path(client: TestClient) -> None:
    response = client.request("PATCH", "/v1/projects/p/models")
    assert response.status_code == 405 and response.headers["allow"] == "GET, PUT"
    assert client.request("PATCH", "/v1/projects/p/memories/000000000000").headers["allow"] == "DELETE, GET"


def test_unknown_project_and_service_level_validation(client: TestClient, service: Obsmem) -> None:
    assert client.get("/v1/projects/nope/models").status_code == 404
    assert client.put("/v1/projects/nope/models", json={"observer": {"model_id": "x"}}).status_code == 404
    service.append_events("p", "s1", [user("hello")])
    from obsmem.errors import ValidationFailed

    with pytest.raises(ValidationFailed) as raised:
        service.switch_models("p", {"observer": {"model_id": "bad id"}})
    assert raised.value.field == "observer.model_id"


def test_reflect_and_memory_details_routes(client: TestClient, service: Obsmem) -> None:
    fill(service)
    assert service.worker_pool().drain(60)
    details = client.get("/v1/projects/p/sessions/s1/memory/details")
    assert details.status_code == 200
    body = details.json()
    assert body["generation_count"] == 1 and body["generation"]["number"] == 1
    assert body["pool"]["coverage"]["not covered"] + body["pool"]["coverage"]["partly covered"] >= 1
    assert all(len(item["supporting_observation_ids"]) == 3 for item in body["reflections"])
    assert {item["coverage"] for item in body["observations"]} <= {"not covered", "partly covered", "strongly covered"}
    assert all(item["source_seqs"] for item in body["observations"])
    assert client.get("/v1/projects/p/sessions/nope/memory/details").status_code == 404
    # Read before the reflection is queued: the worker pool may run it at once and start generation 2.
    status = client.get("/v1/projects/p/sessions/s1/status").json()
    assert status["generation"]["number"] == 1 and status["pool"]["observations_max_tokens"] == 60
    ended = {"type": "om_reflection_end"}
    reflections_before = len(client.get("/v1/projects/p/events", params=ended).json()["events"])
    queued = client.post("/v1/projects/p/sessions/s1/reflect")
    assert queued.status_code == 202 and set(queued.json()) == {"job_id", "queued"}
    assert client.post("/v1/projects/p/sessions/nope/reflect").json()["error"]["code"] == "session_not_found"
    assert service.worker_pool().drain(60)
    assert len(client.get("/v1/projects/p/events", params=ended).json()["events"]) == reflections_before + 1


def test_reflect_without_a_model_is_409(tmp_path: Path) -> None:
    plain = Obsmem(data_dir=tmp_path / "plain")
    with TestClient(create_app(plain), base_url=LOCAL) as other:
        other.post("/v1/projects/p/sessions/s1/events", json={"events": [user("hi")]})
        refused = other.post("/v1/projects/p/sessions/s1/reflect")
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "reflection_off"
        assert other.get("/v1/projects/p/sessions/s1/status").json()["reflector"] == "not_configured"
    with pytest.raises(ReflectionOff) as refused_here:  # its own class, not ObservationOff with another code
        plain.reflect("p", "s1")
    assert not isinstance(refused_here.value, ObservationOff) and refused_here.value.status == 409
    plain.close()


# -- the CLI --------------------------------------------------------------------------------------------------


def run(data_dir: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--data-dir", str(data_dir), *args], catch_exceptions=False)


@pytest.fixture
def data_dir(tmp_path: Path, server: ScriptedChatServer) -> Path:
    data = tmp_path / "cli"
    data.mkdir()
    (data / "obsmem.toml").write_text(
        f"""
[model]
base_url = "{server.base_url}"
model_id = "scripted"
max_retries = 0

[observer]
buffer_tokens = 100

[reflector]
reflect_after_observation_tokens = 100

[pools]
observations_max_tokens = 60
"""
    )
    return data


def test_cli_models_reflect_view_details_and_status(data_dir: Path) -> None:
    with Obsmem(data_dir=data_dir) as service:
        fill(service)
        assert service.worker_pool().drain(60)
    shown = run(data_dir, "models", "p")
    assert shown.exit_code == 0 and "reflector" in shown.stdout and "settings" in shown.stdout
    switched = run(data_dir, "models", "p", "--reflector", "qwen2.5-14b", "--context-window", "65536", "--json")
    assert switched.exit_code == 0
    assert json.loads(switched.stdout)["models"]["reflector"]["context_window_tokens"] == 65536
    assert "Changed: dropper" in run(data_dir, "models", "p", "--dropper", "small").stdout
    reset = json.loads(run(data_dir, "models", "p", "--reset", "reflector", "--reset", "dropper", "--json").stdout)
    assert reset["changed"] == ["reflector", "dropper"]
    bad = run(data_dir, "models", "p", "--observer", "bad id")
    assert bad.exit_code == 2 and "invalid_request" in bad.stderr
    assert run(data_dir, "models", "p", "--reset", "observer", "--observer", "x").exit_code == 2
    assert run(data_dir, "models", "p", "--context-window", "4096").exit_code == 2

    queued = run(data_dir, "reflect", "p", "s1")
    assert queued.exit_code == 0 and "Reflection of s1" in queued.stdout
    assert run(data_dir, "reflect", "p", "nope").exit_code == 1

    details = run(data_dir, "view", "p", "s1", "--details")
    assert details.exit_code == 0
    for needle in ("Generation", "Pool", "Coverage", "Reflections (4)", "supported by", "partly covered"):
        assert needle in details.stdout, needle
    as_json = json.loads(run(data_dir, "view", "p", "s1", "--details", "--json").stdout)
    assert as_json["generation_count"] == 1
    plain = run(data_dir, "view", "p", "s1")
    assert plain.stdout.startswith('<obsmem-memory session="s1" generation="1">')

    status = run(data_dir, "status", "p", "--session", "s1")
    assert "Generation" in status.stdout and "1 (" in status.stdout and "of the target" in status.stdout
    events = run(data_dir, "events", "p")
    assert "om_reflection_end" in events.stdout and "om_dropper_end" in events.stdout
    assert "om_model_changed" in events.stdout


def test_per_role_overrides_from_the_settings_file_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`[observer.model]`, `[dropper.model]` (another endpoint, its own key) and an environment override."""
    from obsmem.settings import load_settings

    shared_script, dropper_script = PipelineScript(), PipelineScript()
    with ScriptedChatServer(shared_script) as shared, ScriptedChatServer(dropper_script) as other:
        data = tmp_path / "data"
        data.mkdir()
        (data / "obsmem.toml").write_text(
            f"""
[model]
base_url = "{shared.base_url}"
model_id = "shared-model"
api_key = "shared-key-0123456789"
max_retries = 0
timeout_seconds = 10

[observer]
buffer_tokens = 100

[observer.model]
model_id = "small-observer"
context_window_tokens = 16384

[reflector]
reflect_after_observation_tokens = 100

[dropper.model]
base_url = "{other.base_url}"
model_id = "dropper-model"
api_key = "dropper-key-0123456789"

[pools]
observations_max_tokens = 60

[jobs]
retry_backoff_seconds = 0.01
poll_seconds = 0.02
"""
        )
        monkeypatch.setenv("OBSMEM_REFLECTOR__MODEL__RETRY_BACKOFF_SECONDS", "0.5")
        settings = load_settings(data_dir=data)
        assert settings.model_for("observer").context_window_tokens == 16384
        assert settings.model_for("reflector").retry_backoff_seconds == 0.5
        assert settings.model_for("dropper").retry_backoff_seconds == settings.model.retry_backoff_seconds
        service = Obsmem(settings)
        try:
            fill(service)
            models = service.models("p").models
            assert {role: (m.model_id, m.context_window_tokens, m.source) for role, m in models.items()} == {
                "observer": ("small-observer", 16384, "settings"),
                "reflector": ("shared-model", 32768, "settings"),
                "dropper": ("dropper-model", 32768, "settings"),
            }
            assert service.worker_pool().drain(60)
        finally:
            service.close()
        assert set(shared_script.models) == {
            ("record_observations", "small-observer"),
            ("record_reflections", "shared-model"),
        }
        assert set(dropper_script.models) == {("drop_observations", "dropper-model")}
        assert {r.headers["authorization"] for r in shared.requests} == {"Bearer shared-key-0123456789"}
        assert {r.headers["authorization"] for r in other.requests} == {"Bearer dropper-key-0123456789"}
