"""The conversation index is caught up outside the worker pool too: by the CLI commands that store events,
by ``obsmem index``, and by the MCP server from its start; status reports what is left on every surface."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from obsmem.app import Obsmem
from obsmem.projects import ProjectRegistry
from obsmem.surfaces.cli import cli
from obsmem.surfaces.cli_catchup import catch_up, catch_up_after_write
from obsmem.surfaces.mcp_server import catch_up_conversation

TURNS = [{"role": "user", "content": f"turn {n} about the flaky login test"} for n in range(1, 8)]


def _backlog(data_dir: Path, project: str) -> int:
    """What status says, read by another process's view of the data directory."""
    registry = ProjectRegistry(data_dir)
    try:
        with registry.get(project).read() as conn:
            through = conn.execute("SELECT indexed_through FROM event_trigram_progress").fetchone()[0]
            return conn.execute("SELECT count(*) FROM events WHERE id > ?", (through,)).fetchone()[0]
    finally:
        registry.close()


def _run(data_dir: Path, *args: str, stdin: str | None = None):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, ["--data-dir", str(data_dir), *args], input=stdin, catch_exceptions=False)


@pytest.fixture
def service_options() -> dict[str, Any]:
    """No workers in the test server: their housekeeping indexes the conversation too, at moments of its own,
    and the counts below are of what the test itself indexed."""
    return {"jobs": {"in_server": False}}


def test_status_reports_the_backlog_in_python_and_http(service: Obsmem, client: TestClient) -> None:
    service.append_events("p", "s1", TURNS)
    assert service.status("p").unindexed_events == 7 == service.conversation_backlog("p")
    body = client.get("/v1/projects/p/status").json()
    assert body["unindexed_events"] == 7
    assert service.index_conversation("p", max_events=3) == 3
    assert service.status("p").to_dict()["unindexed_events"] == 4
    assert service.index_conversation("p") == 4 and client.get("/v1/projects/p/status").json()["unindexed_events"] == 0


def test_cli_ingest_and_import_leave_the_index_current(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps(turn) + "\n" for turn in TURNS))
    assert _run(data_dir, "ingest", "p", str(events), "--session", "s1").exit_code == 0
    assert _backlog(data_dir, "p") == 0
    records = tmp_path / "more.jsonl"
    records.write_text("".join(json.dumps({"session_id": "s2", "type": "message", **turn}) + "\n" for turn in TURNS))
    imported = _run(data_dir, "import", "obsmem", str(records), "--project", "q", "--json")
    assert imported.exit_code == 0, imported.output
    assert json.loads(imported.stdout)["totals"]["added"] == 7 and _backlog(data_dir, "q") == 0
    status = _run(data_dir, "status", "q", "--json")
    assert json.loads(status.stdout)["unindexed_events"] == 0


def test_the_catch_up_after_a_write_is_bounded_and_says_what_is_left(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    with Obsmem(data_dir=tmp_path / "data") as service:
        service.append_events("p", "s1", TURNS)
        assert catch_up(service, "p", max_events=3, show_progress=False) == (3, 4)
        catch_up_after_write(service, ["p", "never-written"], max_events=2, show_progress=False)
        assert service.conversation_backlog("p") == 2
        assert not service.projects.exists("never-written")  # a project is never created by a catch-up
    left = capsys.readouterr().err
    assert "p: 2 events not in the conversation index yet" in left and "obsmem index p" in left
    assert "flaky" not in left  # counts only, never event text


def test_status_table_names_the_backlog_and_index_clears_it(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with Obsmem(data_dir=data_dir) as service:
        service.append_events("p", "s1", TURNS)
    table = _run(data_dir, "status", "p")
    assert table.exit_code == 0 and "7 events not in the conversation index yet" in table.stdout
    # Without [semantic], `obsmem index` indexes the conversation alone.
    indexed = _run(data_dir, "index", "p", "--json")
    assert indexed.exit_code == 0, indexed.output
    assert json.loads(indexed.stdout) == {"conversation_events_indexed": 7}
    assert _backlog(data_dir, "p") == 0 and "not in the conversation index" not in _run(data_dir, "status", "p").stdout
    again = _run(data_dir, "index", "p")
    assert again.exit_code == 0 and "p: conversation index current (0 events indexed now)" in again.stdout
    unknown = _run(data_dir, "index", "nope")
    assert unknown.exit_code == 1 and "project_not_found" in unknown.stderr


def test_the_mcp_catch_up_stops_when_asked_and_skips_a_missing_project(tmp_path: Path) -> None:
    with Obsmem(data_dir=tmp_path / "data") as service:
        service.append_events("p", "s1", TURNS)
        stopped = threading.Event()
        stopped.set()
        assert catch_up_conversation(service, "p", stopped) == 0
        assert catch_up_conversation(service, "p", threading.Event()) == 7
        assert catch_up_conversation(service, "nope", threading.Event()) == 0
        assert not service.projects.exists("nope")


def test_the_stdio_mcp_server_catches_up_from_its_start(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with Obsmem(data_dir=data_dir) as service:
        service.append_events("p", "s1", TURNS)
    assert _backlog(data_dir, "p") == 7
    args = ["-m", "obsmem.surfaces.mcp_server", "--data-dir", str(data_dir), "--project", "p"]
    params = StdioServerParameters(command=sys.executable, args=args, env={"HF_HUB_OFFLINE": "1"}, cwd=str(data_dir))

    async def scenario() -> None:
        with anyio.fail_after(60):
            async with Client(params) as client:
                found = await client.call_tool("memory_search", {"query": "turn 3", "scope": "conversation"})
                assert not found.is_error and len(json.loads(found.content[0].text)["hits"]) == 1
                deadline = time.monotonic() + 30
                while _backlog(data_dir, "p") and time.monotonic() < deadline:
                    await anyio.sleep(0.1)
                assert _backlog(data_dir, "p") == 0

    anyio.run(scenario)


def test_cli_restore_leaves_the_index_current(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with Obsmem(data_dir=data_dir) as service:
        service.append_events("p", "s1", TURNS)
    exported = tmp_path / "p.jsonl"
    assert _run(data_dir, "export", "p", "--output", str(exported), "--no-progress").exit_code == 0
    restored = _run(data_dir, "restore", str(exported), "--project", "copy", "--json")
    assert restored.exit_code == 0, restored.output
    assert _backlog(data_dir, "copy") == 0
