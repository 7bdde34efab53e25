"""``obsmem status`` and ``obsmem upgrade`` over every project: a damaged project is flagged, the healthy ones
still answer, and the exit status says something failed."""

from __future__ import annotations

import json
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner, Result

from obsmem.app import Obsmem
from obsmem.settings import load_settings
from obsmem.storage.migrations import MIGRATIONS, migrate
from obsmem.surfaces.cli import STORAGE_EXIT, cli
from obsmem.trust.stores import UserRegistry

DAMAGED = "error: storage_corrupt: database damaged/obsmem.db is not a readable SQLite database"


def run(data_dir: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--data-dir", str(data_dir), *args], catch_exceptions=False)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A healthy project `good`, and `damaged`, whose database file holds bytes that are no SQLite database."""
    data = tmp_path / "data"
    with Obsmem(load_settings(data_dir=data)) as service:
        service.append_events("good", "s1", [{"role": "user", "content": "hello"}])
    damaged = data / "projects" / "damaged" / "obsmem.db"
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(bytes(range(256)) * 32)
    return data


def test_status_lists_the_healthy_projects_and_flags_the_damaged_one(data_dir: Path) -> None:
    table = run(data_dir, "status")
    assert table.exit_code == STORAGE_EXIT
    assert "good " in table.stdout and f"damaged: {DAMAGED}" in " ".join(table.stdout.split())
    listing = run(data_dir, "status", "--json")
    assert listing.exit_code == STORAGE_EXIT
    body = json.loads(listing.stdout)
    assert [(row["project"], row["events"]) for row in body["projects"]] == [("good", 1)]
    assert [(row["project"], row["code"]) for row in body["failed"]] == [("damaged", "storage_corrupt")]


def test_status_of_healthy_projects_lists_no_failures(data_dir: Path) -> None:
    (data_dir / "projects" / "damaged" / "obsmem.db").unlink()
    listing = run(data_dir, "status", "--json")
    assert listing.exit_code == 0 and json.loads(listing.stdout)["failed"] == []


def test_upgrade_upgrades_the_healthy_projects_and_tiers_and_names_the_damaged_one(data_dir: Path) -> None:
    tier = UserRegistry(data_dir).database_path("alice")  # after the damaged project, in the command's order
    tier.parent.mkdir(parents=True)
    conn = apsw.Connection(str(tier))
    migrate(conn, MIGRATIONS[:-1])
    conn.close()
    result = run(data_dir, "upgrade", "--no-progress")
    assert result.exit_code == STORAGE_EXIT
    assert "good: up to date" in result.stdout and "1 project(s) up to date." in result.stdout
    assert "user tier alice: up to date" in result.stdout
    assert result.stderr.startswith(f"damaged: {DAMAGED}")
    assert result.stderr.endswith("not upgraded: damaged; see the errors above\n")


def test_upgrade_json_lists_the_projects_and_tiers_upgraded_and_the_failures(data_dir: Path) -> None:
    tier = UserRegistry(data_dir).database_path("alice")
    tier.parent.mkdir(parents=True)
    conn = apsw.Connection(str(tier))
    migrate(conn, MIGRATIONS[:-1])
    conn.close()
    result = run(data_dir, "upgrade", "--no-progress", "--json")
    assert result.exit_code == STORAGE_EXIT and result.stderr == ""
    body = json.loads(result.stdout)
    assert [row["project"] for row in body["projects"]] == ["good"]
    assert [row["owner"] for row in body["user_tiers"]] == ["alice"]
    assert all(isinstance(row["seconds"], float) for row in body["projects"] + body["user_tiers"])
    assert [(row["project"], row["code"]) for row in body["failed"]] == [("damaged", "storage_corrupt")]
    assert body["failed_user_tiers"] == []
    (data_dir / "projects" / "damaged" / "obsmem.db").unlink()
    again = run(data_dir, "upgrade", "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["failed"] == []
