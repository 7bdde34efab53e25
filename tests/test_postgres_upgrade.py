"""``obsmem upgrade``: every project and every user tier gets the migrations it lacks before any server opens it.

A project whose schema predates ``p0007_short_needles`` (its indexes and function dropped and its record
removed, as a database written by the version before it) is brought up to date by the command, and the
command lists every project of the database. A user tier of notes (a schema of its own on PostgreSQL, a
database file of its own on SQLite) has the projects' migrations and is brought up to date the same way.
"""

from __future__ import annotations

from pathlib import Path

import apsw
import psycopg
from click.testing import CliRunner

from obsmem.app import Obsmem
from obsmem.settings import load_settings
from obsmem.storage.migrations import MIGRATIONS, migrate
from obsmem.storage.postgres import project_schema
from obsmem.storage.postgres.users import user_schema
from obsmem.surfaces.cli import cli
from obsmem.trust.stores import UserRegistry

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


def _upgrade_postgres(tmp: Path, dsn: str) -> str:
    result = CliRunner().invoke(
        cli,
        ["--data-dir", str(tmp / "pg"), "upgrade", "--no-progress"],
        env={"OBSMEM_STORAGE__BACKEND": "postgres", "OBSMEM_STORAGE__DSN": dsn},
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return result.output


def _raw_versions(dsn: str, schema: str) -> set[int]:
    """The migrations a schema records, read without obsmem (opening it through obsmem would migrate it)."""
    with psycopg.connect(dsn) as raw:
        return {row[0] for row in raw.execute(f"SELECT version FROM {schema}.schema_migrations")}


def test_upgrade_applies_what_each_project_lacks(tmp_path: Path, postgres_dsn: str) -> None:
    settings = load_settings(data_dir=tmp_path / "pg", storage={"backend": "postgres", "dsn": postgres_dsn})
    with Obsmem(settings) as service:
        for project in ("older", "newer"):
            service.append_events(project, "s1", [{"role": "user", "seq": 1, "content": "hello"}])
        with service.store.get("older").write() as conn:
            for statement in filter(str.strip, OLD_SCHEMA.split(";")):
                conn.execute(statement)
    assert 7 not in _raw_versions(postgres_dsn, project_schema("older"))
    output = _upgrade_postgres(tmp_path, postgres_dsn)
    assert "older: up to date" in output and "newer: up to date" in output
    assert "2 project(s) up to date." in output and "0 user tier(s) up to date." in output
    assert 7 in _versions(postgres_dsn, tmp_path, "older")
    with psycopg.connect(postgres_dsn) as raw:
        indexes = raw.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND indexname LIKE %s",
            (project_schema("older"), "%short_grams"),
        ).fetchall()
    assert len(indexes) == 3


def test_upgrade_applies_what_each_user_tier_lacks(tmp_path: Path, postgres_dsn: str) -> None:
    settings = load_settings(data_dir=tmp_path / "pg", storage={"backend": "postgres", "dsn": postgres_dsn})
    with Obsmem(settings) as service:
        service.append_events("work", "s1", [{"role": "user", "seq": 1, "content": "hello"}])
        for owner in ("alice", "bob"):
            service.save_note("work", "Run the formatter before committing.", tier="user", user=owner)
        with service.store.user_tiers().get("alice").write() as conn:
            for statement in filter(str.strip, OLD_SCHEMA.split(";")):
                conn.execute(statement)
    alice = user_schema("alice")
    assert 7 not in _raw_versions(postgres_dsn, alice)
    output = _upgrade_postgres(tmp_path, postgres_dsn)
    assert "work: up to date" in output and "1 project(s) up to date." in output
    assert "user tier alice: up to date" in output and "user tier bob: up to date" in output
    assert "2 user tier(s) up to date." in output
    assert 7 in _raw_versions(postgres_dsn, alice)
    with psycopg.connect(postgres_dsn) as raw:
        indexes = raw.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND indexname LIKE %s", (alice, "%short_grams")
        ).fetchall()
    assert len(indexes) == 3


def test_upgrade_opens_every_sqlite_project(tmp_path: Path) -> None:
    with Obsmem(load_settings(data_dir=tmp_path)) as service:
        service.append_events("one", "s1", [{"role": "user", "seq": 1, "content": "hello"}])
    result = CliRunner().invoke(cli, ["--data-dir", str(tmp_path), "upgrade", "--no-progress"], env={})
    assert result.exit_code == 0, result.output
    assert "one: up to date" in result.output and "1 project(s) up to date." in result.output


def test_upgrade_applies_what_a_sqlite_user_tier_lacks(tmp_path: Path) -> None:
    with Obsmem(load_settings(data_dir=tmp_path)) as service:
        service.append_events("one", "s1", [{"role": "user", "seq": 1, "content": "hello"}])
    # A user tier written by the version before the notes' migration: every migration but the last.
    path = UserRegistry(tmp_path).database_path("alice")
    path.parent.mkdir(parents=True)
    conn = apsw.Connection(str(path))
    migrate(conn, MIGRATIONS[:-1])
    conn.close()
    result = CliRunner().invoke(cli, ["--data-dir", str(tmp_path), "upgrade", "--no-progress"], env={})
    assert result.exit_code == 0, result.output
    assert "user tier alice: up to date" in result.output and "1 user tier(s) up to date." in result.output
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    versions = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
    conn.close()
    assert versions == {migration.version for migration in MIGRATIONS}
