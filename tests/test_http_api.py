"""The HTTP API contract: every route, its fields and its errors (in-process, FastAPI's TestClient)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from obsmem import __version__
from obsmem.app import Obsmem
from obsmem.surfaces.http.errors import FIELD_CODES
from support.http_server import ALPHA_NOTES, footprint, seed


@pytest.fixture
def service_options(backend_storage: dict[str, Any]) -> dict[str, Any]:
    """Every contract test runs on SQLite and again on PostgreSQL: the API must not tell them apart."""
    return {"server": {"max_body_bytes": 64 * 1024}, **backend_storage}


@pytest.fixture
def ids(service: Obsmem) -> list[str]:
    return seed(service, "alpha", ALPHA_NOTES)


def error_of(response: Any, status: int, code: str, field: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    if field is not None:
        assert error.get("field") == field, error
    return error


def post_raw(client: TestClient, path: str, body: bytes) -> Any:
    return client.post(path, content=body, headers={"content-type": "application/json"})


# -- health, projects, status --------------------------------------------------------------------


def test_health(client: TestClient) -> None:
    response = client.get("/v1/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "version": __version__}


def test_projects_and_status(client: TestClient, ids: list[str]) -> None:
    assert client.get("/v1/projects").json() == {"projects": ["alpha"]}
    status = client.get("/v1/projects/alpha/status").json()
    assert status["project"] == "alpha"
    assert status["sessions"] == 1 and status["events"] == len(ALPHA_NOTES)
    assert status["observations"] == len(ALPHA_NOTES) and status["reflections"] == 0
    assert status["mode"] == "exact" and status["database_bytes"] > 0
    assert isinstance(status["last_activity"], str)


def test_reading_an_unknown_project_is_404_and_creates_nothing(client: TestClient, service: Obsmem) -> None:
    before = footprint(service)
    error_of(client.get("/v1/projects/nope/status"), 404, "project_not_found", "project")
    error_of(client.post("/v1/projects/nope/search", json={"query": "x"}), 404, "project_not_found")
    error_of(client.get("/v1/projects/nope/memories/0123456789ab"), 404, "project_not_found")
    assert footprint(service) == before
    assert client.get("/v1/projects").json() == {"projects": []}


# -- events ---------------------------------------------------------------------------------------


def test_append_events_receipt_duplicates_and_conflict(client: TestClient) -> None:
    path = "/v1/projects/alpha/sessions/s-1/events"
    events = [
        {"role": "user", "content": "run the tests"},
        {"role": "assistant", "type": "tool_call", "tool_name": "bash", "tool_args": {"cmd": "pytest -q"}},
        {"role": "tool", "type": "tool_result", "tool_name": "bash", "content": "3 passed"},
    ]
    first = client.post(path, json={"events": events})
    assert first.status_code == 200
    assert first.json() == {"appended": 3, "duplicates": 0, "last_seq": 3}
    again = client.post(path, json={"events": [dict(e, seq=i) for i, e in enumerate(events, start=1)]})
    assert again.json() == {"appended": 0, "duplicates": 3, "last_seq": 3}
    more = client.post(path, json={"events": [{"role": "user", "content": "next"}]})
    assert more.json() == {"appended": 1, "duplicates": 0, "last_seq": 4}
    conflict = client.post(path, json={"events": [{"seq": 2, "role": "user", "content": "something else"}]})
    error = error_of(conflict, 409, "seq_conflict")
    assert error["seq"] == 2
    assert client.get("/v1/projects/alpha/status").json()["events"] == 4


def _nested(depth: int) -> list[Any]:
    """A list ``depth`` levels deep: ``[[[...[]...]]]``."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"events": [{"role": "robot", "content": "x"}]}, "events.0.role"),
        ({"events": [{"role": "user", "type": "shout"}]}, "events.0.type"),
        ({"events": [{"role": "user", "content": 5}]}, "events.0.content"),
        ({"events": [{"role": "user", "seq": 0}]}, "events.0.seq"),
        ({"events": [{"role": "user", "seq": 10**40}]}, "events.0.seq"),
        ({"events": [{"role": "user", "created_at": "2026-02-30T10:00:00Z"}]}, "events.0.created_at"),
        ({"events": [{"role": "user", "created_at": "0001-01-01T00:00:00+01:00"}]}, "events.0.created_at"),
        ({"events": [{"role": "user", "surprise": 1}]}, "events.0.surprise"),
        ({"events": [{"role": "user", "bad\ud800key": 1}]}, None),
        ({"events": [{"role": "assistant", "type": "tool_call", "tool_args": _nested(500)}]}, "events.0.tool_args"),
        ({"events": [{"role": "assistant", "type": "tool_call", "tool_args": [float("nan")]}]}, "events.0.tool_args"),
        (
            {"events": [{"role": "assistant", "type": "tool_call", "tool_args": {"x": float("inf")}}]},
            "events.0.tool_args",
        ),
        ({"events": []}, "events"),
        ({"events": "not a list"}, "events"),
        ({"events": [1]}, "events.0"),
        ({}, "events"),
        ([], "body"),
    ],
)
def test_append_events_rejects_bad_input(client: TestClient, service: Obsmem, body: Any, field: str | None) -> None:
    before = footprint(service)
    response = post_raw(client, "/v1/projects/alpha/sessions/s1/events", json.dumps(body).encode())
    error = error_of(response, 422, "invalid_request", field)
    assert "robot" not in error["message"] and "shout" not in error["message"]
    assert footprint(service) == before  # nothing stored, no project created


def test_a_number_past_what_json_can_hold_is_refused(client: TestClient, service: Obsmem) -> None:
    """``1e400`` parses as infinity: no strict JSON can write it back."""
    before = footprint(service)
    body = b'{"events": [{"role": "assistant", "type": "tool_call", "tool_args": {"x": 1e400}}]}'
    error = error_of(post_raw(client, "/v1/projects/alpha/sessions/s1/events", body), 422, "invalid_request")
    assert error["field"] == "events.0.tool_args" and "not finite" in error["message"]
    assert footprint(service) == before


def test_append_events_rejects_a_bad_session_id(client: TestClient) -> None:
    response = client.post("/v1/projects/alpha/sessions/-bad/events", json={"events": [{"role": "user"}]})
    error_of(response, 422, "invalid_session", "session_id")


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ({"role": "user", "content": "half \ud800 a character"}, "events.1.content"),
        ({"role": "assistant", "type": "tool_call", "tool_name": "B\ud83d"}, "events.1.tool_name"),
        ({"role": "assistant", "type": "tool_call", "tool_call_id": "c\ud83d"}, "events.1.tool_call_id"),
        ({"role": "assistant", "type": "tool_call", "tool_args": {"k": ["\ud83d"]}}, "events.1.tool_args"),
        ({"role": "assistant", "type": "tool_call", "tool_args": {"\ud83d": 1}}, "events.1.tool_args"),
        ({"role": "user", "content": "x", "\ud83d": 1}, "events.1"),
    ],
)
def test_lone_surrogate_text_is_refused_by_field_and_nothing_is_stored(
    client: TestClient, event: dict[str, Any], field: str
) -> None:
    # A client can repair what it sends (the transcript importers and obsmem ingest repair files, which
    # cannot be sent again): a 422 naming the field, never a 500, and nothing of the batch stored.
    body = json.dumps({"events": [{"role": "user", "content": "kept?"}, event]}).encode()
    error_of(
        post_raw(client, "/v1/projects/alpha/sessions/s1/events", body),
        422,
        "invalid_request",
        field,
    )
    assert client.get("/v1/projects").json()["projects"] == []


# -- observations ---------------------------------------------------------------------------------


def test_write_observations_receipt(client: TestClient) -> None:
    client.post("/v1/projects/alpha/sessions/s1/events", json={"events": [{"role": "user", "content": "hi"}] * 2})
    good = {"session_id": "s1", "content": "User greeted", "timestamp": "2026-01-01 10:00", "source_refs": [1]}
    items = [
        good,
        dict(good, source_refs=[{"session_id": "s1", "seq": 99}]),
        dict(good, timestamp="2026-02-30 10:00"),
        dict(good, content="two\nlines"),
        dict(good, session_id="unknown"),
        good,
    ]
    response = client.post("/v1/projects/alpha/observations", json={"observations": items})
    assert response.status_code == 200
    receipt = response.json()
    assert [entry["index"] for entry in receipt["added"]] == [0]
    added = receipt["added"][0]
    assert len(added["id"]) == 12 and added["memory_id"].startswith(added["id"]) and len(added["memory_id"]) == 64
    assert [entry["index"] for entry in receipt["duplicates"]] == [5]
    assert receipt["duplicates"][0]["memory_id"] == added["memory_id"]
    rejected = {entry["index"]: entry for entry in receipt["rejected"]}
    assert sorted(rejected) == [1, 2, 3, 4]
    assert rejected[1]["code"] == "unknown_source_ref"
    assert rejected[4]["code"] == "session_not_found"
    assert all(set(entry) == {"index", "code", "message"} for entry in receipt["rejected"])
    again = client.post("/v1/projects/alpha/observations", json={"observations": [good]}).json()
    assert again["added"] == [] and len(again["duplicates"]) == 1


@pytest.mark.parametrize("body", [{"observations": [1]}, {"observations": "x"}, {"observations": []}, {}])
def test_write_observations_needs_a_list_of_objects(client: TestClient, body: Any) -> None:
    error_of(client.post("/v1/projects/alpha/observations", json=body), 422, "invalid_request")


# -- search ---------------------------------------------------------------------------------------


def expected(query: str, notes: list[tuple[str, str, str]] = ALPHA_NOTES) -> list[str]:
    """The reference answer: ASCII case-insensitive substring, newest first."""
    folded = query.lower()
    hits = [(stamp, text) for stamp, _, text in notes if folded in text.lower()]
    return [text for _, text in sorted(hits, reverse=True)]


def search(client: TestClient, **body: Any) -> Any:
    return client.post("/v1/projects/alpha/search", json=body)


def test_search_hit_fields(client: TestClient, ids: list[str]) -> None:
    response = search(client, query="maptoolarguments")
    assert response.status_code == 200
    result = response.json()
    assert set(result) == {"mode", "hits", "truncated", "partial"}
    assert result["mode"] == "exact" and result["truncated"] is False and result["partial"] is False
    assert [hit["content"] for hit in result["hits"]] == expected("maptoolarguments")
    hit = result["hits"][-1]
    assert hit == {
        "id": ids[0][:12],
        "memory_id": ids[0],
        "kind": "observation",
        "session_id": "s1",
        "date": "2026-01-05 09:00",
        "importance": "high",
        "content": ALPHA_NOTES[0][2],
    }


@pytest.mark.parametrize(
    "query",
    [
        "NEAR(",
        "NEAR(a b)",
        '"',
        '"foo:bar"',
        "*",
        "src/*.py",
        "AND",
        "gpt-4",
        "c++",
        "foo:bar",
        "%",
        "100%",
        "_",
        "snake_case",
        "#2510",
        "2.5.10",
        "OR",
        "-",
        "a",
        "ZZZ-not-there",
    ],
)
def test_hostile_queries_are_literal_substrings(client: TestClient, ids: list[str], query: str) -> None:
    response = search(client, query=query, limit=50)
    assert response.status_code == 200, response.text
    assert [hit["content"] for hit in response.json()["hits"]] == expected(query)


@pytest.mark.parametrize(
    ("query", "code"),
    [("", "invalid_query"), ("   ", "invalid_query"), ("a\x00b", "invalid_query"), ("x" * 1001, "invalid_query")],
)
def test_bad_queries_are_422(client: TestClient, ids: list[str], query: str, code: str) -> None:
    error = error_of(search(client, query=query), 422, code, "query")
    assert "\x00" not in error["message"] and "xxxx" not in error["message"]


def test_a_1000_character_query_is_fine(client: TestClient, ids: list[str]) -> None:
    assert search(client, query="y" * 1000).json()["hits"] == []


def test_the_query_length_is_counted_after_trimming(client: TestClient, ids: list[str]) -> None:
    # docs/http-api.md, Limits: 1 to 1000 characters after trimming, as the tools and the Python API count.
    padded = search(client, query="  " + "y" * 1000 + "   ")
    assert padded.status_code == 200, padded.text
    long = error_of(search(client, query="y" * 1001), 422, "invalid_query", "query")
    assert long["message"] == "query is longer than 1000 characters"
    for blank in ("", " " * 2000):
        assert error_of(search(client, query=blank), 422, "invalid_query", "query")["message"] == (
            "query must not be empty"
        )


def test_limit_truncated_and_session_filter(client: TestClient, ids: list[str]) -> None:
    result = search(client, query="a", limit=2).json()
    assert len(result["hits"]) == 2 and result["truncated"] is True
    assert [hit["content"] for hit in result["hits"]] == expected("a")[:2]
    assert search(client, query="a", session_id="other").json()["hits"] == []
    assert len(search(client, query="a", session_id="s1", limit=50).json()["hits"]) == len(expected("a"))


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        ({"query": 5}, "invalid_query", "query"),
        ({"query": None}, "invalid_query", "query"),
        ({}, "invalid_query", "query"),
        ({"query": "x", "limit": "5"}, "invalid_request", "limit"),
        ({"query": "x", "limit": True}, "invalid_request", "limit"),
        ({"query": "x", "limit": 2.5}, "invalid_request", "limit"),
        ({"query": "x", "limit": 0}, "invalid_request", "limit"),
        ({"query": "x", "limit": 51}, "invalid_request", "limit"),
        ({"query": "x", "limit": 10**30}, "invalid_request", "limit"),
        ({"query": "x", "mode": "fuzzy"}, "invalid_request", "mode"),
        ({"query": "x", "session_id": "../etc"}, "invalid_session", "session_id"),
        ({"query": "x", "after": 20260101}, "invalid_date", "after"),
        ({"query": "x", "extra": 1}, "invalid_request", "extra"),
    ],
)
def test_wrong_json_types_are_422_naming_the_field(
    client: TestClient, ids: list[str], body: dict[str, Any], code: str, field: str
) -> None:
    error_of(search(client, **body), 422, code, field)


def test_hybrid_mode_without_semantic_settings_is_a_clear_error(client: TestClient, ids: list[str]) -> None:
    error_of(search(client, query="x", mode="hybrid"), 422, "mode_unavailable", "mode")


@pytest.mark.parametrize(
    ("after", "before", "field"),
    [
        ("2026-02-30", None, "after"),
        (None, "2026-02-30", "before"),
        ("2026-01-05 24:00", None, "after"),
        ("2026-01-05 10:60", None, "after"),
        ("2026-01-01T10:00Z", None, "after"),
        ("2026-01-01 10:00+02:00", None, "after"),
        ("2026-01-01 10:00:00", None, "after"),
        ("26-01-01", None, "after"),
        ("2026-01-08", "2026-01-07", "after"),
        ("2026-01-07 10:01", "2026-01-07 10:00", "after"),
    ],
)
def test_bad_dates_are_422_naming_the_field(
    client: TestClient, ids: list[str], after: str | None, before: str | None, field: str
) -> None:
    body: dict[str, Any] = {"query": "a"}
    if after is not None:
        body["after"] = after
    if before is not None:
        body["before"] = before
    error_of(search(client, **body), 422, "invalid_date", field)


def test_date_bounds_are_inclusive(client: TestClient, ids: list[str]) -> None:
    def dates(**bounds: str) -> list[str]:
        return [hit["date"] for hit in search(client, query="a", limit=50, **bounds).json()["hits"]]

    assert dates(after="2026-02-01", before="2026-02-01") == ["2026-02-01 23:59", "2026-02-01 00:00"]
    assert dates(before="2026-02-01 00:00")[0] == "2026-02-01 00:00"
    assert dates(after="2026-02-01 23:59") == ["2026-02-01 23:59"]
    assert dates(after="2026-01-06", before="2026-01-06 10:00") == ["2026-01-06 10:00"]


# -- recall ---------------------------------------------------------------------------------------


def test_recall_returns_the_memory_and_its_sources(client: TestClient, ids: list[str]) -> None:
    for identifier in (ids[0][:12], ids[0][:40], ids[0]):
        response = client.get(f"/v1/projects/alpha/memories/{identifier}")
        assert response.status_code == 200
        body = response.json()
        assert set(body) == {"memory", "sources", "supporting"}
        assert body["memory"]["memory_id"] == ids[0] and body["memory"]["content"] == ALPHA_NOTES[0][2]
        assert body["memory"]["source_refs"] == [{"session_id": "s1", "seq": 1}]
        assert body["sources"] == [
            {
                "session_id": "s1",
                "seq": 1,
                "role": "user",
                "type": "message",
                "content": f"event for: {ALPHA_NOTES[0][2]}",
                "created_at": body["sources"][0]["created_at"],
            }
        ]
        assert body["supporting"] == []
    scoped = client.get(f"/v1/projects/alpha/memories/{ids[0][:12]}", params={"session_id": "s1"})
    assert scoped.status_code == 200


def test_recall_errors(client: TestClient, ids: list[str]) -> None:
    error = error_of(client.get("/v1/projects/alpha/memories/ffffffffffff"), 404, "not_found", "id")
    assert "project 'alpha'" in error["message"]
    scoped = client.get("/v1/projects/alpha/memories/ffffffffffff", params={"session_id": "s9"})
    assert "session 's9'" in error_of(scoped, 404, "not_found")["message"]
    assert "pass session_id from a memory_search hit" in scoped.json()["error"]["message"]
    for bad in ("XYZ", "abc", "0123456789a", "0123456789AB", "g" * 12, "0" * 65):
        error_of(client.get(f"/v1/projects/alpha/memories/{bad}"), 422, "invalid_id", "id")
    bad_session = client.get(f"/v1/projects/alpha/memories/{ids[0][:12]}", params={"session_id": "a b"})
    error_of(bad_session, 422, "invalid_session", "session_id")


# -- generic errors, body limit -------------------------------------------------------------------


def test_unknown_paths_and_methods_are_json(client: TestClient) -> None:
    error_of(client.get("/v1/nothing-here"), 404, "not_found")
    error_of(client.get("/"), 404, "not_found")
    response = client.delete("/v1/health")
    error_of(response, 405, "method_not_allowed")
    assert "GET" in response.headers["allow"]


@pytest.mark.parametrize(
    "body",
    [b'{"query": "\xff\xfe"}', b"\xff", b'{"query": "x"', b"[" * 50_000, b"nul\x00", b'{"query": "\\ud800"}'],
)
def test_unreadable_bodies_are_422(client: TestClient, ids: list[str], body: bytes) -> None:
    response = post_raw(client, "/v1/projects/alpha/search", body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] in ("invalid_request", "invalid_query")


def test_a_body_without_json_content_type_is_refused(client: TestClient, ids: list[str]) -> None:
    response = client.post(
        "/v1/projects/alpha/search", content=b'{"query": "a"}', headers={"content-type": "text/plain"}
    )
    error_of(response, 422, "invalid_request", "body")


def test_body_limit(client: TestClient, service: Obsmem) -> None:
    limit = service.settings.server.max_body_bytes
    events = [{"role": "user", "content": "x" * 1000} for _ in range(limit // 1000 + 1)]
    response = client.post("/v1/projects/alpha/sessions/s1/events", json={"events": events})
    error_of(response, 413, "payload_too_large")

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams
        yield b'{"events": ['
        for _ in range(limit // 1000 + 1):
            yield b'{"role": "user", "content": "' + b"y" * 1000 + b'"},'
        yield b'{"role": "user"}]}'

    streamed = client.post(
        "/v1/projects/alpha/sessions/s1/events", content=chunks(), headers={"content-type": "application/json"}
    )
    error_of(streamed, 413, "payload_too_large")
    assert "alpha" not in client.get("/v1/projects").json()["projects"]


def test_error_messages_never_echo_the_value(client: TestClient, ids: list[str]) -> None:
    secret = "sk-THIS-IS-SECRET-TEXT"
    responses = [
        search(client, query=secret, after=secret),
        search(client, query=secret, mode=secret),
        search(client, query=secret, session_id=secret + "/"),
        client.post("/v1/projects/alpha/sessions/s1/events", json={"events": [{"role": secret}]}),
        client.post("/v1/projects/alpha/sessions/s1/events", json={"events": [{"role": "user", secret: 1}]}),
    ]
    for response in responses:
        assert response.status_code == 422
        assert "SECRET" not in response.text


def test_openapi_is_published(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    paths = schema["paths"]
    assert set(paths) >= {
        "/v1/health",
        "/v1/projects",
        "/v1/projects/{project}/status",
        "/v1/projects/{project}/sessions/{session_id}/events",
        "/v1/projects/{project}/observations",
        "/v1/projects/{project}/search",
        "/v1/projects/{project}/memories/{id}",
    }
    search_responses = paths["/v1/projects/{project}/search"]["post"]["responses"]
    assert search_responses["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/SearchResponse")
    assert search_responses["422"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorResponse")
    assert client.get("/docs").status_code == 200


def test_delete_memory_removes_it_from_search_and_recall(client: TestClient, ids: list[str]) -> None:
    target = ids[0]
    content = ALPHA_NOTES[0][2]
    assert target in [hit["memory_id"] for hit in search(client, query=content).json()["hits"]]
    response = client.delete(f"/v1/projects/alpha/memories/{target[:12]}")
    assert response.status_code == 200
    assert response.json()["deleted"]["memory_id"] == target
    assert target not in [hit["memory_id"] for hit in search(client, query=content).json()["hits"]]
    error_of(client.get(f"/v1/projects/alpha/memories/{target[:12]}"), 404, "not_found")
    error_of(client.delete(f"/v1/projects/alpha/memories/{target[:12]}"), 404, "not_found")
    error_of(client.delete("/v1/projects/alpha/memories/XYZ"), 422, "invalid_id")
    error_of(client.delete(f"/v1/projects/nope/memories/{target[:12]}"), 404, "project_not_found")


def test_405_lists_every_method_of_the_path(client: TestClient, ids: list[str]) -> None:
    response = client.put(f"/v1/projects/alpha/memories/{ids[0][:12]}")
    error_of(response, 405, "method_not_allowed")
    assert response.headers["allow"] == "DELETE, GET"


def test_pattern_mismatches_say_what_is_allowed_in_words(client: TestClient, ids: list[str]) -> None:
    responses = {
        "after": search(client, query="a", after="2026-03-01T10:00Z"),
        "before": search(client, query="a", before="yesterday"),
        "session_id": search(client, query="a", session_id="../etc"),
        "project": client.post("/v1/projects/Alpha/search", json={"query": "a"}),
        "id": client.get("/v1/projects/alpha/memories/ABCDEF123456"),
    }
    for field, response in responses.items():
        error = error_of(response, 422, FIELD_CODES[field], field)
        assert error["message"].startswith(f"{field} must be"), error["message"]
        assert "^" not in error["message"] and "\\d" not in error["message"]


# -- identifiers that look like secrets ------------------------------------------------------------

SECRET_SESSION = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"


def test_a_session_id_that_looks_like_a_secret_is_refused_on_every_route(
    client: TestClient, service: Obsmem, ids: list[str]
) -> None:
    before = footprint(service)
    session_routes = [
        client.post(f"/v1/projects/alpha/sessions/{SECRET_SESSION}/events", json={"events": [{"role": "user"}]}),
        client.post(f"/v1/projects/fresh/sessions/{SECRET_SESSION}/events", json={"events": [{"role": "user"}]}),
        client.get(f"/v1/projects/alpha/sessions/{SECRET_SESSION}/memory"),
        client.get(f"/v1/projects/alpha/sessions/{SECRET_SESSION}/status"),
        client.get(f"/v1/projects/alpha/memories/{ids[0][:12]}", params={"session_id": SECRET_SESSION}),
        client.post("/v1/projects/alpha/search", json={"query": "gpt", "session_id": SECRET_SESSION}),
    ]
    for response in session_routes:
        error = error_of(response, 422, "invalid_session", "session_id")
        assert "looks like a secret (github_token)" in error["message"], error
        assert SECRET_SESSION not in response.text
    # An invisible character is outside the session id alphabet: refused before it is looked at as a secret.
    split = client.get("/v1/projects/alpha/sessions/AKIA%E2%80%8BIOSFODNN7EXAMPLE/memory")
    error_of(split, 422, "invalid_session", "session_id")
    assert "IOSFODNN7EXAMPLE" not in split.text
    assert footprint(service) == before  # nothing stored, no project created


def test_an_observation_citing_a_secret_looking_session_is_rejected_item_by_item(
    client: TestClient, ids: list[str]
) -> None:
    good = {"session_id": "s1", "content": "kept", "timestamp": "2026-03-02 10:15", "source_refs": [1]}
    bad = dict(good, session_id=SECRET_SESSION, content="refused")
    response = client.post("/v1/projects/alpha/observations", json={"observations": [bad, good]})
    assert response.status_code == 200, response.text
    receipt = response.json()
    assert [item["index"] for item in receipt["added"]] == [1]
    assert [item["index"] for item in receipt["rejected"]] == [0]
    assert "looks like a secret" in receipt["rejected"][0]["message"] and SECRET_SESSION not in response.text


def test_a_project_name_that_looks_like_a_secret_is_refused(client: TestClient, service: Obsmem) -> None:
    before = footprint(service)
    project = "xoxb-2048-4096-zk9qmt3vlp8r"  # a valid slug, and a Slack token
    response = client.post(f"/v1/projects/{project}/sessions/s1/events", json={"events": [{"role": "user"}]})
    error = error_of(response, 422, "invalid_project", "project")
    assert "looks like a secret" in error["message"] and project not in response.text
    assert footprint(service) == before


def test_a_project_directory_named_like_a_secret_is_never_listed(
    client: TestClient, service: Obsmem, backend: str
) -> None:
    if backend == "postgres":
        pytest.skip("SQLite only: about project directories in the data directory, which PostgreSQL has none of")
    seed(service, "alpha", ALPHA_NOTES[:1])
    service.projects.release("alpha")
    projects = service.settings.data_dir / "projects"
    (projects / "alpha").rename(projects / "xoxb-2048-4096-zk9qmt3vlp8r")  # as if made before names were checked
    assert client.get("/v1/projects").json() == {"projects": []}
    assert service.project_names() == []


def test_a_validation_error_never_echoes_a_secret_shaped_key(client: TestClient, ids: list[str]) -> None:
    # The token is a plain identifier too, so only the secret check keeps it out of the error.
    token = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
    body = {"events": [{"role": "user", "content": "x", token: 1}]}
    response = client.post("/v1/projects/alpha/sessions/s1/events", json=body)
    error = error_of(response, 422, "invalid_request", "events.0.<key>")
    assert token not in response.text and token not in json.dumps(error)
    ordinary = client.post("/v1/projects/alpha/sessions/s1/events", json={"events": [{"role": "user", "extra": 1}]})
    error_of(ordinary, 422, "invalid_request", "events.0.extra")  # ordinary keys are still named
