"""The eval harness against a PostgreSQL settings file: its projects go to a temporary database on the
configured server, dropped afterwards, and the modes measure the PostgreSQL hybrid search."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
from click.testing import CliRunner, Result

from obsmem.surfaces.cli import cli
from support.eval_datasets import write_locomo
from support.model_server import ModelServer


def _config(tmp_path: Path, server: ModelServer, dsn: str) -> Path:
    path = tmp_path / "pg.toml"
    path.write_text(
        f'[storage]\nbackend = "postgres"\ndsn = "{dsn}"\n'
        "[semantic.embedding]\n"
        f'provider = "openai"\nbase_url = "{server.base_url}"\nmodel_id = "hashed-words"\n'
        "[semantic.index]\nbackground = false\n",
        encoding="utf-8",
    )
    return path


def _invoke(config: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--config", str(config), "eval", *args])


def _databases(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {row[0] for row in conn.execute("SELECT datname FROM pg_database")}


def test_eval_runs_in_a_temporary_database(tmp_path: Path, model_server: ModelServer, postgres_dsn: str) -> None:
    config = _config(tmp_path, model_server, postgres_dsn)
    before = _databases(postgres_dsn)
    result = _invoke(config, "questions", "--modes", "exact,bm25,hybrid", "--json")
    assert result.exit_code == 0, result.output
    exact, bm25, hybrid = json.loads(result.stdout)["results"]
    assert exact["questions"] == bm25["questions"] == hybrid["questions"] == 64
    assert exact["by_category"]["identifier"]["hit@10"] == 1.0
    assert hybrid["metrics"]["hit@10"] > 0.5
    data = write_locomo(tmp_path / "locomo.json")
    result = _invoke(config, "locomo", "--data", str(data), "--ways", "a", "--modes", "bm25,hybrid", "--json")
    assert result.exit_code == 0, result.output
    assert [r["mode"] for r in json.loads(result.stdout)["results"]] == ["bm25", "hybrid"]
    # Nothing left behind: the configured database holds no project, and the temporary ones are gone.
    assert _databases(postgres_dsn) == before
    with psycopg.connect(postgres_dsn) as conn:
        assert conn.execute("SELECT to_regclass('obsmem.projects')").fetchone()[0] is None
