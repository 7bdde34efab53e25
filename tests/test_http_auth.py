"""Who may reach what: API keys, per-project keys, hostile project names, loopback-only without keys."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from obsmem.app import Obsmem
from obsmem.surfaces.http import create_app
from obsmem.surfaces.http.guard import PUBLIC_PATHS
from support.http_server import (
    ALPHA_NOTES,
    BETA_NOTES,
    KEY_ALL,
    KEY_ALPHA,
    KEY_BETA,
    KEYS,
    LOCAL,
    WRONG_KEY,
    bearer,
    seed,
    settings_for,
    tree,
)

EVENT_BODY = {"events": [{"role": "user", "content": "hello"}]}
OBSERVATION_BODY = {
    "observations": [{"session_id": "s1", "content": "x", "timestamp": "2026-01-01 10:00", "source_refs": [1]}]
}


@pytest.fixture
def service_options() -> dict[str, Any]:
    return {"api_keys": KEYS}


@pytest.fixture
def service(service: Obsmem) -> Obsmem:
    """The shared service, holding the alpha and beta notes every test here asks for."""
    seed(service, "alpha", ALPHA_NOTES)
    seed(service, "beta", BETA_NOTES)
    return service


def concrete(path: str, project: str = "alpha") -> str:
    values = {"project": project, "session_id": "s1", "id": "0123456789ab", "judgment_id": "j0123456789abcdef"}
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], path)


def protected_routes(client: TestClient) -> list[tuple[str, str]]:
    """Every route the schema publishes, except the public ones, and the MCP endpoint."""
    paths = client.app.openapi()["paths"]  # type: ignore[attr-defined]
    routes = [
        (method.upper(), path)
        for path, operations in paths.items()
        if path not in PUBLIC_PATHS
        for method in operations
    ]
    return [*routes, ("POST", "/mcp/{project}")]


def call(client: TestClient, method: str, path: str, headers: dict[str, str] | None = None) -> Any:
    body: dict[str, Any] | None = None
    if path.endswith("/events"):
        body = EVENT_BODY
    elif path.endswith("/observations"):
        body = OBSERVATION_BODY
    elif path.endswith("/search"):
        body = {"query": "a"}
    elif path.startswith("/mcp"):
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    return client.request(method, concrete(path), json=body, headers=headers)


def test_every_protected_route_is_covered(client: TestClient) -> None:
    paths = {path for _, path in protected_routes(client)}
    assert {"/v1/projects", "/v1/projects/{project}/search", "/v1/projects/{project}/memories/{id}"} <= paths
    assert len(paths) >= 7


@pytest.mark.parametrize(
    "headers",
    [
        None,
        bearer(WRONG_KEY),
        bearer(KEY_ALPHA[:-1]),
        bearer(KEY_ALPHA + "x"),
        {"Authorization": f"Basic {KEY_ALPHA}"},
        {"Authorization": KEY_ALPHA},
        {"Authorization": "Bearer "},
        {"X-Api-Key": KEY_ALPHA},
    ],
)
def test_no_key_or_a_wrong_key_is_401_everywhere(
    client: TestClient, service: Obsmem, headers: dict[str, str] | None
) -> None:
    before = tree(service.settings.data_dir)
    for method, path in protected_routes(client):
        response = call(client, method, path, headers)
        assert response.status_code == 401, (method, path, response.text)
        assert response.json()["error"]["code"] == "unauthorized"
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert "Beta secret" not in response.text and "MapTool" not in response.text
    assert tree(service.settings.data_dir) == before


def test_public_routes_need_no_key(client: TestClient) -> None:
    assert client.get("/v1/health").status_code == 200
    assert client.get("/openapi.json").status_code == 200
    assert client.get("/docs").status_code == 200


def test_the_bearer_scheme_is_case_insensitive(client: TestClient) -> None:
    response = client.get("/v1/projects", headers={"Authorization": f"bearer {KEY_ALPHA}"})
    assert response.status_code == 200


def test_a_key_sees_only_its_projects(client: TestClient) -> None:
    assert client.get("/v1/projects", headers=bearer(KEY_ALPHA)).json() == {"projects": ["alpha"]}
    assert client.get("/v1/projects", headers=bearer(KEY_BETA)).json() == {"projects": ["beta"]}
    assert client.get("/v1/projects", headers=bearer(KEY_ALL)).json() == {"projects": ["alpha", "beta"]}


def test_key_for_alpha_can_neither_read_nor_write_beta(client: TestClient, service: Obsmem) -> None:
    alpha = bearer(KEY_ALPHA)
    beta_id = client.post("/v1/projects/beta/search", json={"query": "secret"}, headers=bearer(KEY_BETA)).json()
    beta_id = beta_id["hits"][0]["id"]
    missing = client.get("/v1/projects/zeta/status", headers=bearer(KEY_ALL)).json()
    assert missing["error"]["code"] == "project_not_found"
    attempts = [
        client.post("/v1/projects/beta/search", json={"query": "secret"}, headers=alpha),
        client.get(f"/v1/projects/beta/memories/{beta_id}", headers=alpha),
        client.get("/v1/projects/beta/status", headers=alpha),
        client.post("/v1/projects/beta/sessions/s1/events", json=EVENT_BODY, headers=alpha),
        client.post("/v1/projects/beta/observations", json=OBSERVATION_BODY, headers=alpha),
        client.post("/mcp/beta", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=alpha),
    ]
    for response in attempts:
        assert response.status_code == 404, response.text
        error = response.json()["error"]
        assert error["code"] == "project_not_found"
        assert error["message"] == "project 'beta' does not exist"
        assert "secret" not in response.text.lower()
    # Same answer as for a project that really does not exist.
    assert client.get("/v1/projects/beta/status", headers=alpha).json() == {
        "error": {"code": "project_not_found", "message": "project 'beta' does not exist", "field": "project"}
    }
    status = client.get("/v1/projects/beta/status", headers=bearer(KEY_ALL)).json()
    assert status["events"] == len(BETA_NOTES)  # nothing was written


def test_a_key_cannot_create_a_project_it_may_not_use(client: TestClient, service: Obsmem) -> None:
    response = client.post("/v1/projects/delta/sessions/s1/events", json=EVENT_BODY, headers=bearer(KEY_ALPHA))
    assert response.status_code == 404
    assert not (service.settings.data_dir / "projects" / "delta").exists()
    allowed = client.post("/v1/projects/gamma/sessions/s1/events", json=EVENT_BODY, headers=bearer(KEY_BETA))
    assert allowed.status_code == 200  # a write by an allowed key creates the project


HOSTILE_PROJECTS = [
    "..",
    ".",
    "%2e%2e",
    "%2E%2E",
    ".%2e",
    "%2e",
    "a%2Fb",
    "a%2F..%2F..%2Fetc",
    "..%2F..%2Fetc%2Fpasswd",
    "%2F",
    "%5C..%5C",
    "http:%2F%2Fevil.example",
    "file:%2F%2F%2Fetc%2Fpasswd",
    "%00",
    "alpha%00",
    "ALPHA",
    "-alpha",
    "_alpha",
    "a" * 65,
    "%20alpha",
    "~root",
    "%24HOME",
    "al%E2%80%8Bpha",
    "%C0%AE%C0%AE",
    "%ff",
]


@pytest.mark.parametrize("project", HOSTILE_PROJECTS)
def test_hostile_project_names_are_refused_and_create_nothing(
    client: TestClient, service: Obsmem, project: str
) -> None:
    before = tree(service.settings.data_dir)
    admin = bearer(KEY_ALL)
    responses = [
        client.post(f"/v1/projects/{project}/sessions/s1/events", json=EVENT_BODY, headers=admin),
        client.post(f"/v1/projects/{project}/observations", json=OBSERVATION_BODY, headers=admin),
        client.post(f"/v1/projects/{project}/search", json={"query": "a"}, headers=admin),
        client.get(f"/v1/projects/{project}/memories/0123456789ab", headers=admin),
        client.get(f"/v1/projects/{project}/status", headers=admin),
        client.post(f"/mcp/{project}", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=admin),
    ]
    for response in responses:
        assert response.status_code in (404, 422), (project, response.status_code, response.text)
        assert response.json()["error"]["code"] in ("invalid_project", "not_found", "project_not_found")
    assert tree(service.settings.data_dir) == before


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(project=st.text(min_size=1, max_size=80))
def test_any_project_name_is_a_clean_answer(client: TestClient, service: Obsmem, project: str) -> None:
    from urllib.parse import quote

    before = tree(service.settings.data_dir)
    path = f"/v1/projects/{quote(project, safe='')}/search"
    response = client.post(path, json={"query": "a"}, headers=bearer(KEY_ALL))
    assert response.status_code in (200, 404, 422), response.text
    written = client.post(
        f"/v1/projects/{quote(project, safe='')}/observations", json={"observations": [{}]}, headers=bearer(KEY_ALPHA)
    )
    assert written.status_code in (200, 404, 422)
    assert tree(service.settings.data_dir) == before


def test_without_keys_only_loopback_hosts_and_origins_are_answered(tmp_path: Path) -> None:
    with (
        Obsmem(settings_for(tmp_path, allowed_hosts=["memory.internal"])) as service,
        TestClient(create_app(service), base_url=LOCAL) as client,
    ):
        assert client.get("/v1/projects").status_code == 200
        for host in ("localhost:8765", "127.0.0.1", "[::1]:8765", "memory.internal"):
            assert client.get("/v1/projects", headers={"host": host}).status_code == 200, host
        for host in ("evil.example", "127.0.0.1.evil.example", "memory.internal.evil.example"):
            response = client.get("/v1/projects", headers={"host": host})
            assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"
            assert "server.allowed_hosts" in response.json()["error"]["message"]  # what to do about it
        assert client.get("/v1/projects", headers={"origin": "http://127.0.0.1:8765"}).status_code == 200
        for origin in ("http://evil.example", "null", "https://localhost.evil.example"):
            response = client.post("/v1/projects/x/search", json={"query": "a"}, headers={"origin": origin})
            assert response.status_code == 403, origin
            assert "server.allowed_hosts" in response.json()["error"]["message"]


def test_without_keys_the_schema_declares_no_security(tmp_path: Path) -> None:
    with Obsmem(settings_for(tmp_path)) as service:
        schema = create_app(service).openapi()
    assert "securitySchemes" not in schema.get("components", {})


def test_with_keys_the_schema_declares_bearer_auth(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    assert schema["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "An API key from the settings.",
    }
    assert schema["paths"]["/v1/health"]["get"]["security"] == []
    assert schema["paths"]["/v1/projects/{project}/search"]["post"]["security"] == [{"bearerAuth": []}]
