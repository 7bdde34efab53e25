"""Hybrid search from the command line: the help names the real default mode, and an index that nobody is
building says what to run. Embeddings come from the loopback model server (fast, deterministic)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from obsmem.indexer.project import INDEXING_LOCK
from obsmem.surfaces.cli import cli
from support.model_server import ModelServer
from support.semantic_service import add_memories, corpus, make_service


def _config(path: Path, server: ModelServer, *, background: bool = False) -> Path:
    path.write_text(
        "[semantic]\n[semantic.embedding]\n"
        f'provider = "openai"\nbase_url = "{server.base_url}"\nmodel_id = "hashed-words"\n'
        f"[semantic.index]\nbackground = {'true' if background else 'false'}\n"
    )
    return path


def _mode_help(*args: str) -> str:
    result = CliRunner().invoke(cli, [*args, "search", "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return next(line for line in result.output.splitlines() if "--mode" in line)


def test_search_help_names_the_default_of_the_loaded_settings(tmp_path: Path, model_server: ModelServer) -> None:
    assert "default: exact (no [semantic] section)" in _mode_help("--data-dir", str(tmp_path))
    config = _config(tmp_path / "semantic.toml", model_server)
    assert "default: hybrid ([semantic] is on)" in _mode_help("--config", str(config))
    off = tmp_path / "off.toml"
    off.write_text("[semantic]\nenabled = false\n")
    assert "default: exact ([semantic] enabled = false)" in _mode_help("--config", str(off))
    broken = tmp_path / "broken.toml"
    broken.write_text("[semantic\n")
    assert "Search mode [default: hybrid when [semantic] is configured" in _mode_help("--config", str(broken))


def test_unbuilt_index_says_what_to_run(tmp_path: Path, model_server: ModelServer) -> None:
    data = tmp_path / "data"
    with make_service(data, model_server) as service:
        add_memories(service, "app", corpus(4))
    config = _config(tmp_path / "obsmem.toml", model_server)
    runner = CliRunner()
    base = ["--config", str(config), "--data-dir", str(data)]
    result = runner.invoke(cli, [*base, "search", "app", "auth clock"])
    assert result.exit_code == 1
    assert "error: index_building:" in result.output and "run `obsmem index app`" in result.output
    # The same advice over the JSON error shape the HTTP API and tools use.
    with make_service(data, model_server) as service:
        index = service.indexer.project("app")
        # While another process holds the project's indexing lock, the index is being built: wait for it.
        with index.files.locked(INDEXING_LOCK):
            busy = runner.invoke(cli, [*base, "search", "app", "auth clock"])
        assert busy.exit_code == 1
        assert "search again shortly" in busy.output and "obsmem index" not in busy.output
    assert runner.invoke(cli, [*base, "index", "app", "--json"]).exit_code == 0
    found = runner.invoke(cli, [*base, "search", "app", "auth clock", "--json"])
    assert found.exit_code == 0, found.output
    assert json.loads(found.output)["mode"] == "hybrid"
    # The status table's reader sees the search mode and the index, not only a --json reader.
    status = runner.invoke(cli, [*base, "status", "app"], terminal_width=200)
    assert "app: search hybrid; semantic index 4 of 4 indexed, 0 pending, graph file present" in status.output


def test_a_serving_process_counts_as_indexing(tmp_path: Path, model_server: ModelServer) -> None:
    """A process whose background indexer runs is building the index itself: its searches are told to
    wait, never to run `obsmem index` (which would find the project busy)."""
    with make_service(tmp_path / "one-shot", model_server) as service:
        add_memories(service, "app", corpus(2))
        assert service.indexer is not None and not service.indexer.is_indexing("app")
    with make_service(tmp_path / "serving", model_server, index={"background": True}) as service:
        add_memories(service, "app", corpus(2))
        assert service.indexer is not None and service.indexer.is_indexing("app")
