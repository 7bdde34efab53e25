"""``obsmem index`` and hybrid ``obsmem search`` from the command line against a PostgreSQL settings file, and
the HTTP server indexing in the background and answering hybrid searches there."""

from __future__ import annotations

import json
import time
from pathlib import Path

from click.testing import CliRunner
from fastapi.testclient import TestClient

from obsmem.app import Obsmem
from obsmem.settings import load_settings
from obsmem.surfaces.cli import cli
from obsmem.surfaces.http import create_app
from support.http_server import LOCAL
from support.model_server import ModelServer
from support.semantic_service import add_memories, corpus, semantic_settings


def _config(path: Path, server: ModelServer, dsn: str) -> Path:
    path.write_text(
        f'[storage]\nbackend = "postgres"\ndsn = "{dsn}"\n'
        "[jobs]\nin_server = false\n"
        "[semantic]\n[semantic.embedding]\n"
        f'provider = "openai"\nbase_url = "{server.base_url}"\nmodel_id = "hashed-words"\n'
        "[semantic.index]\nbackground = false\n"
    )
    return path


def test_index_then_hybrid_search_on_postgres(tmp_path: Path, model_server: ModelServer, postgres_dsn: str) -> None:
    config = _config(tmp_path / "pg.toml", model_server, postgres_dsn)
    with Obsmem(load_settings(config)) as service:
        ids = add_memories(service, "app", corpus(30))
    runner = CliRunner()
    base = ["--config", str(config)]
    unbuilt = runner.invoke(cli, [*base, "search", "app", "auth clock"])
    assert unbuilt.exit_code == 1 and "error: index_building:" in unbuilt.output
    assert "run `obsmem index app`" in unbuilt.output
    indexed = runner.invoke(cli, [*base, "index", "app", "--json", "--no-progress"])
    assert indexed.exit_code == 0, indexed.output
    summary = json.loads(indexed.output)
    assert (summary["indexed_count"], summary["source_count"], summary["pending"]) == (30, 30, 0)
    found = runner.invoke(cli, [*base, "search", "app", corpus(30)[4][1], "--json"])
    assert found.exit_code == 0, found.output
    result = json.loads(found.output)
    assert result["mode"] == "hybrid" and result["hits"][0]["memory_id"] == ids[4]


def test_the_server_indexes_in_the_background_and_searches_hybrid(
    tmp_path: Path, model_server: ModelServer, postgres_dsn: str
) -> None:
    settings = load_settings(
        data_dir=tmp_path,
        storage={"backend": "postgres", "dsn": postgres_dsn},
        jobs={"in_server": False},
        semantic=semantic_settings(model_server, index={"background": True, "poll_seconds": 0.2}),
    )
    service = Obsmem(settings)
    try:
        with TestClient(create_app(service), base_url=LOCAL) as client:
            client.post("/v1/projects/p/sessions/s1/events", json={"events": [{"role": "user", "content": "x"}] * 2})
            written = client.post(
                "/v1/projects/p/observations",
                json={
                    "observations": [
                        {
                            "session_id": "s1",
                            "timestamp": f"2026-01-0{i + 1} 10:00",
                            "content": text,
                            "importance": "low",
                            "source_refs": [1],
                        }
                        for i, text in enumerate(["zebra quagga okapi", "auth login clock"])
                    ]
                },
            ).json()
            deadline = time.monotonic() + 30
            while client.get("/v1/projects/p/status").json().get("indexed_count") != 2:
                assert time.monotonic() < deadline, "the server's background indexer did not index the project"
                time.sleep(0.1)
            found = client.post("/v1/projects/p/search", json={"query": "zebra quagga"}).json()
            assert found["mode"] == "hybrid" and found["hits"][0]["id"] == written["added"][0]["id"]
            conversation = client.post("/v1/projects/p/search", json={"query": "x", "scope": "conversation"})
            assert conversation.status_code == 422 and conversation.json()["error"]["code"] == "mode_unavailable"
    finally:
        service.close()
