"""The HTTP API over the PostgreSQL backend: the ported routes answer as on SQLite, the others 501
``not_on_postgres``; a server with ``[jobs] in_server = true`` runs its workers on the database."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from obsmem.app import Obsmem
from obsmem.settings import load_settings
from obsmem.surfaces.http import create_app
from support.http_server import LOCAL


def _service(tmp_path: Path, dsn: str, *, in_server: bool) -> Obsmem:
    return Obsmem(
        load_settings(data_dir=tmp_path, storage={"backend": "postgres", "dsn": dsn}, jobs={"in_server": in_server})
    )


def test_ported_routes_answer_as_on_sqlite(tmp_path: Path, postgres_dsn: str) -> None:
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
            judgments = client.get("/v1/projects/p/judgments")
            assert judgments.status_code == 200 and judgments.json()["judgments"] == []
            refused = client.post("/v1/projects/p/search", json={"query": "hello", "mode": "hybrid"})
            assert refused.status_code == 422 and refused.json()["error"]["code"] == "mode_unavailable"  # as on SQLite
            conversation = client.post("/v1/projects/p/search", json={"query": "hi", "scope": "conversation"})
            assert [hit["seq"] for hit in conversation.json()["hits"]] == [1]
            client.post("/v1/projects/p/notes", json={"action": "save", "content": "hi there, a note"})
            trust = client.post("/v1/projects/p/search", json={"query": "hi", "trust": "all"})
            assert [(hit["kind"], hit["trusted"]) for hit in trust.json()["hits"]] == [("note", False)]
    finally:
        service.close()


def test_a_server_runs_its_workers_on_the_database(tmp_path: Path, postgres_dsn: str) -> None:
    service = _service(tmp_path, postgres_dsn, in_server=True)
    try:
        with TestClient(create_app(service), base_url=LOCAL) as client:
            assert service.workers is not None and service.workers.running
            client.post("/v1/projects/p/sessions/s1/events", json={"events": [{"role": "user", "content": "hi"}]})
            status = client.get("/v1/projects/p/sessions/s1/status").json()
            assert status["observer"] == "not_configured" and status["pending_events"] == 1
            refused = client.post("/v1/projects/p/sessions/s1/observe").json()["error"]
            assert refused["code"] != "not_on_postgres" and "no [model] is configured" in refused["message"]
        assert not service.workers.running  # stopped with the server
    finally:
        service.close()
