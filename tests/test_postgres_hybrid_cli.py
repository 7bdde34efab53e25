"""``obsmem index`` and hybrid ``obsmem search`` from the command line against a PostgreSQL settings file."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from obsmem.app import Obsmem
from obsmem.settings import load_settings
from obsmem.surfaces.cli import cli
from support.model_server import ModelServer
from support.semantic_service import add_memories, corpus


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
