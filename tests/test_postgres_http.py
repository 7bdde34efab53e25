"""The HTTP API over the PostgreSQL backend: the ported routes answer as on SQLite, the others 501
``not_on_postgres``; a server that would start workers refuses to start, naming the setting."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from obsmem.app import Obsmem
from obsmem.errors import NotOnPostgres
from obsmem.settings import load_settings
from obsmem.surfaces.http import create_app
from support.http_server import LOCAL


def _service(tmp_path: Path, dsn: str, *, in_server: bool) -> Obsmem:
    return Obsmem(
        load_settings(data_dir=tmp_path, storage={"backend": "postgres", "dsn": dsn}, jobs={"in_server": in_server})
    )


def test_ported_routes_answer_and_the_rest_are_501(tmp_path: Path, postgres_dsn: str) -> None:
    service = _service(tmp_path, postgres_dsn, in_server=False)
    try:
        with TestClient(create_app(service), base_url=LOCAL) as client:
            appended = client.post(
                "/v1/projects/p/sessions/s1/events", json={"events": [{"role": "user", "content": "hi"}]}
            )
            assert appended.status_code == 200 and appended.json()["appended"] == 1
            written = client.post(
                "/v1/projects/p/observations",
                json={
                    "observations": [
                        {
                            "session_id": "s1",
                            "timestamp": "2026-01-01 10:00",
                            "content": "Said HELLO",
                            "importance": "low",
                            "source_refs": [1],
                        }
                    ]
                },
            )
            memory_id = written.json()["added"][0]["id"]
            found = client.post("/v1/projects/p/search", json={"query": "hello"}).json()
            assert [hit["id"] for hit in found["hits"]] == [memory_id] and found["truncated"] is False
            assert client.get(f"/v1/projects/p/memories/{memory_id}").json()["memory"]["content"] == "Said HELLO"
            assert client.get("/v1/projects/p/status").json()["observations"] == 1
            assert client.get("/v1/projects/ghost/status").json()["error"]["code"] == "project_not_found"
            refused = client.post("/v1/projects/p/sessions/s1/observe")
            assert refused.status_code == 501 and refused.json()["error"]["code"] == "not_on_postgres"
            conversation = client.post("/v1/projects/p/search", json={"query": "hi", "scope": "conversation"})
            assert [hit["seq"] for hit in conversation.json()["hits"]] == [1]
            client.post("/v1/projects/p/notes", json={"action": "save", "content": "hi there, a note"})
            trust = client.post("/v1/projects/p/search", json={"query": "hi", "trust": "all"})
            assert [(hit["kind"], hit["trusted"]) for hit in trust.json()["hits"]] == [("note", False)]
    finally:
        service.close()


def test_a_server_that_would_run_workers_refuses_to_start(tmp_path: Path, postgres_dsn: str) -> None:
    service = _service(tmp_path, postgres_dsn, in_server=True)
    try:
        with pytest.raises(NotOnPostgres, match="in_server = false"), TestClient(create_app(service), base_url=LOCAL):
            pass
    finally:
        service.close()
