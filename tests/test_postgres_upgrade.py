"""``obsmem upgrade``: every project gets the migrations it lacks before any server opens it.

A project whose schema predates ``p0007_short_needles`` (its indexes and function dropped and its record
removed, as a database written by the version before it) is brought up to date by the command, and the
command lists every project of the database.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
from click.testing import CliRunner

from obsmem.app import Obsmem
from obsmem.settings import load_settings
from obsmem.storage.postgres import project_schema
from obsmem.surfaces.cli import cli

OLD_SCHEMA = """
DROP INDEX memory_short_grams;
DROP INDEX event_short_grams;
DROP INDEX event_argument_short_grams;
DROP FUNCTION obsmem_short_grams(TEXT);
DELETE FROM schema_migrations WHERE version = 7;
"""


def _versions(dsn: str, tmp: Path, project: str) -> list[int]:
    settings = load_settings(data_dir=tmp / "pg", storage={"backend": "postgres", "dsn": dsn})
    with Obsmem(settings) as service, service.store.get(project).read() as conn:
        return [row[0] for row in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]


def test_upgrade_applies_what_each_project_lacks(tmp_path: Path, postgres_dsn: str) -> None:
    settings = load_settings(data_dir=tmp_path / "pg", storage={"backend": "postgres", "dsn": postgres_dsn})
    with Obsmem(settings) as service:
        for project in ("older", "newer"):
            service.append_events(project, "s1", [{"role": "user", "seq": 1, "content": "hello"}])
        with service.store.get("older").write() as conn:
            for statement in filter(str.strip, OLD_SCHEMA.split(";")):
                conn.execute(statement)
    # Opening the project is what migrates it, so the old state is checked without opening it through obsmem.
    with psycopg.connect(postgres_dsn) as raw:
        rows = raw.execute(f"SELECT version FROM {project_schema('older')}.schema_migrations").fetchall()
        assert 7 not in {row[0] for row in rows}
    result = CliRunner().invoke(
        cli,
        ["--data-dir", str(tmp_path / "pg"), "upgrade", "--no-progress"],
        env={"OBSMEM_STORAGE__BACKEND": "postgres", "OBSMEM_STORAGE__DSN": postgres_dsn},
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert "older: up to date" in result.output and "newer: up to date" in result.output
    assert "2 project(s) up to date." in result.output
    assert 7 in _versions(postgres_dsn, tmp_path, "older")
    with psycopg.connect(postgres_dsn) as raw:
        indexes = raw.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND indexname LIKE %s",
            (project_schema("older"), "%short_grams"),
        ).fetchall()
    assert len(indexes) == 3


def test_upgrade_opens_every_sqlite_project(tmp_path: Path) -> None:
    with Obsmem(load_settings(data_dir=tmp_path)) as service:
        service.append_events("one", "s1", [{"role": "user", "seq": 1, "content": "hello"}])
    result = CliRunner().invoke(cli, ["--data-dir", str(tmp_path), "upgrade", "--no-progress"], env={})
    assert result.exit_code == 0, result.output
    assert "one: up to date" in result.output and "1 project(s) up to date." in result.output
