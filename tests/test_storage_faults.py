"""Storage faults are answered, not crashed: a full disk, a read-only data directory, an I/O error, a lock
held beyond the timeout and a damaged file each have a stable code (503 over HTTP, exit 74 from the CLI,
``<code>: <message>`` from the tools), no half-created project is left behind, and the server recovers
by itself once the fault is gone.

The faults are real: a small tmpfs filled to the last block, a read-only bind mount, and an SQLite VFS
that fails I/O (see support.storage_faults).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import apsw
import httpx
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from obsmem.app import Obsmem
from obsmem.errors import StorageBusy, StorageFull, StorageIOError, StorageReadOnly
from obsmem.settings import load_settings
from obsmem.storage import connection
from obsmem.surfaces.cli import STORAGE_EXIT, cli
from obsmem.surfaces.http.app import create_app
from obsmem.surfaces.tools import run_tool
from support.http_server import LOCAL, live_server, seed
from support.model_server import ModelServer
from support.semantic_service import add_memories, corpus, make_service
from support.storage_faults import failing_vfs, fill, make_writable, read_only_view, small_tmpfs

NOTES = [("2026-01-05 09:00", "high", "the deploy script needs the staging flag")]
BIG_BATCH = {"events": [{"role": "user", "content": "x" * 200_000} for _ in range(10)]}  # 2 MB of text
SMALL_BATCH = {"events": [{"role": "user", "content": "a short event"}]}


def project_files(data_dir: Path) -> set[str]:
    root = data_dir / "projects"
    return {str(path.relative_to(root)) for path in root.rglob("*")} if root.exists() else set()


def assert_fault(response: httpx.Response, code: str, *, retry_after: bool) -> None:
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert ("retry-after" in response.headers) is retry_after
    assert "x" * 20 not in error["message"]  # never memory text


# -- a full disk -------------------------------------------------------------------------------------------


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    # Room for BIG_BATCH once space returns: its 2 MB of text, the trigram index of that text (positions:
    # about a byte per character) and their pages in the write-ahead log.
    with small_tmpfs(tmp_path / "disk", size="16m") as mount:
        yield mount


def test_a_full_disk_is_503_storage_full_and_the_server_recovers_when_space_returns(
    full_disk: Path, tmp_path: Path
) -> None:
    data_dir = full_disk / "data"
    with live_server(data_dir) as base, httpx.Client(base_url=base, timeout=30) as client:
        assert client.post("/v1/projects/existing/sessions/s1/events", json=SMALL_BATCH).status_code == 200
        filler = fill(full_disk)
        before = project_files(data_dir)

        # A first write to a new project leaves nothing behind: not listed, not half there.
        response = client.post("/v1/projects/fresh/sessions/s1/events", json=SMALL_BATCH)
        assert_fault(response, "storage_full", retry_after=True)
        assert project_files(data_dir) == before
        assert client.get("/v1/projects").json()["projects"] == ["existing"]
        assert client.get("/v1/projects/fresh/status").status_code == 404

        # A write that needs space in an existing project; reads still answer.
        assert_fault(
            client.post("/v1/projects/existing/sessions/s1/events", json=BIG_BATCH), "storage_full", retry_after=True
        )
        status = client.get("/v1/projects/existing/status")
        assert status.status_code == 200 and status.json()["events"] == 1
        assert client.get("/v1/health").status_code == 200

        filler.unlink()  # space returns: the same requests now succeed, with no restart
        assert client.post("/v1/projects/existing/sessions/s1/events", json=BIG_BATCH).status_code == 200
        assert client.post("/v1/projects/fresh/sessions/s1/events", json=SMALL_BATCH).status_code == 200
        assert client.get("/v1/projects").json()["projects"] == ["existing", "fresh"]
        assert client.get("/v1/projects/existing/status").json()["events"] == 11


def test_a_full_disk_from_the_cli_and_the_python_api(full_disk: Path, tmp_path: Path) -> None:
    data_dir = full_disk / "data"
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps({"session_id": "s1", "role": "user", "type": "message", "content": "hi"}) + "\n")
    with Obsmem(data_dir=data_dir) as service:
        service.append_events("existing", "s1", SMALL_BATCH["events"])
        filler = fill(full_disk)
        with pytest.raises(StorageFull):
            service.append_events("existing", "s1", BIG_BATCH["events"])
        with pytest.raises(StorageFull):
            service.append_events("fresh", "s1", SMALL_BATCH["events"])
        assert service.project_names() == ["existing"]
    result = CliRunner().invoke(cli, ["--data-dir", str(data_dir), "ingest", "fresh", str(events)])
    assert result.exit_code == STORAGE_EXIT, result.output
    assert "error: storage_full: " in result.output and "Traceback" not in result.output
    assert project_files(data_dir) == {"existing", "existing/obsmem.db"} | {
        name for name in project_files(data_dir) if name.startswith("existing/obsmem.db-")
    }
    filler.unlink()
    result = CliRunner().invoke(cli, ["--data-dir", str(data_dir), "ingest", "fresh", str(events)])
    assert result.exit_code == 0, result.output


# -- a read-only data directory -----------------------------------------------------------------------------


def test_a_read_only_data_directory_refuses_writes_with_storage_read_only(tmp_path: Path) -> None:
    source = tmp_path / "data"
    with Obsmem(data_dir=source) as service:
        seed(service, "alpha", NOTES)
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps({"session_id": "s2", "role": "user", "type": "message", "content": "new"}) + "\n")
    with read_only_view(source, tmp_path / "read-only") as data_dir:
        # Closed cleanly: no -wal or -shm file beside the database, and none can be made here.
        assert project_files(data_dir) == {"alpha", "alpha/obsmem.db"}
        service = Obsmem(load_settings(data_dir=data_dir))
        try:
            with TestClient(create_app(service), base_url=LOCAL, raise_server_exceptions=False) as client:
                response = client.post("/v1/projects/alpha/sessions/s1/events", json=SMALL_BATCH)
                assert_fault(response, "storage_read_only", retry_after=False)  # retrying cannot help
                response = client.post("/v1/projects/beta/sessions/s1/events", json=SMALL_BATCH)
                assert_fault(response, "storage_read_only", retry_after=False)
                # Reads answer.
                search = client.post("/v1/projects/alpha/search", json={"query": "deploy"})
                assert search.status_code == 200 and len(search.json()["hits"]) == 1, search.text
                status = client.get("/v1/projects/alpha/status")
                assert status.status_code == 200 and status.json()["events"] == len(NOTES), status.text
                assert client.get("/v1/projects").json()["projects"] == ["alpha"]
                assert client.get("/v1/health").status_code == 200
            outcome = run_tool(service, "alpha", "memory_search", {"query": "deploy"})
            assert not outcome.is_error and len(outcome.result["hits"]) == 1, outcome.text
            with pytest.raises(StorageReadOnly):
                service.append_events("gamma", "s1", SMALL_BATCH["events"])
        finally:
            service.close()
        result = CliRunner().invoke(cli, ["--data-dir", str(data_dir), "ingest", "alpha", str(events)])
        assert result.exit_code == STORAGE_EXIT, result.output
        assert "error: storage_read_only: " in result.output and "Traceback" not in result.output
        result = CliRunner().invoke(cli, ["--data-dir", str(data_dir), "search", "alpha", "deploy", "--json"])
        assert result.exit_code == 0 and len(json.loads(result.stdout)["hits"]) == 1, result.output
        assert project_files(data_dir) == {"alpha", "alpha/obsmem.db"}


def test_a_read_only_view_follows_writers_elsewhere_and_writes_once_writable_again(tmp_path: Path) -> None:
    source = tmp_path / "data"
    with Obsmem(data_dir=source) as service:
        service.append_events("alpha", "s1", SMALL_BATCH["events"])
    with read_only_view(source, tmp_path / "read-only") as data_dir, Obsmem(data_dir=data_dir) as reader:
        assert reader.status("alpha").events == 1
        # The same files written through a writable path, closed before the reader looks again: the
        # reader sees the change rather than a stale copy.
        with Obsmem(data_dir=source) as writer:
            writer.append_events("alpha", "s2", SMALL_BATCH["events"])
        assert reader.status("alpha").events == 2
        with Obsmem(data_dir=source) as writer:  # and while the writer keeps its log open
            writer.append_events("alpha", "s3", SMALL_BATCH["events"])
            assert reader.status("alpha").events == 3
        with pytest.raises(StorageReadOnly):
            reader.append_events("alpha", "s4", SMALL_BATCH["events"])
        make_writable(data_dir)  # the fault is fixed: the same service writes, with no restart
        reader.append_events("alpha", "s4", SMALL_BATCH["events"])
        assert reader.status("alpha").events == 4


def test_a_log_that_cannot_be_read_is_storage_read_only_never_a_stale_answer(tmp_path: Path) -> None:
    source = tmp_path / "data"
    with Obsmem(data_dir=source) as service:
        service.append_events("alpha", "s1", SMALL_BATCH["events"])
    # Another process writes and dies (its write is in the log, not yet in the file); the log's index goes.
    writer = (
        "import os, sys; from obsmem.app import Obsmem; service = Obsmem(data_dir=sys.argv[1]); "
        "service.append_events('alpha', 's2', [{'role': 'user'}]); os._exit(0)"
    )
    subprocess.run([sys.executable, "-c", writer, str(source)], check=True, timeout=120)
    (source / "projects" / "alpha" / "obsmem.db-shm").unlink()
    with (
        read_only_view(source, tmp_path / "read-only") as data_dir,
        Obsmem(data_dir=data_dir) as reader,
        pytest.raises(StorageReadOnly),
    ):
        reader.status("alpha")
    with Obsmem(data_dir=source) as service:  # where it can be written, the log is read and nothing was lost
        assert service.status("alpha").events == 2


# -- an I/O error -------------------------------------------------------------------------------------------


def test_an_io_error_is_503_storage_io_error_everywhere_and_passes(tmp_path: Path) -> None:
    with failing_vfs() as vfs, Obsmem(load_settings(data_dir=tmp_path / "data")) as service:
        seed(service, "alpha", NOTES)
        with TestClient(create_app(service), base_url=LOCAL, raise_server_exceptions=False) as client:
            vfs.fail_writes = True
            response = client.post("/v1/projects/alpha/sessions/s1/events", json=SMALL_BATCH)
            assert_fault(response, "storage_io_error", retry_after=True)
            with pytest.raises(StorageIOError):
                service.append_events("alpha", "s1", SMALL_BATCH["events"])
            vfs.fail_writes = False
            vfs.fail_reads = True
            service.release("alpha")  # a fresh connection must read the file (no cached pages)
            outcome = run_tool(service, "alpha", "memory_search", {"query": "deploy"})
            assert outcome.is_error and outcome.text.startswith("storage_io_error: "), outcome.text
            vfs.fail_reads = False
            response = client.post("/v1/projects/alpha/sessions/s1/events", json=SMALL_BATCH)
            assert response.status_code == 200, response.text
            assert service.status("alpha").events == len(NOTES) + 1


# -- a lock held beyond the busy timeout ---------------------------------------------------------------------


def test_a_lock_held_beyond_the_timeout_is_503_storage_busy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connection, "BUSY_TIMEOUT_MS", 200)
    with Obsmem(load_settings(data_dir=tmp_path / "data")) as service:
        seed(service, "alpha", NOTES)
        holder = apsw.Connection(str(service.database("alpha").path))
        holder.execute("BEGIN IMMEDIATE")
        try:
            with TestClient(create_app(service), base_url=LOCAL, raise_server_exceptions=False) as client:
                response = client.post("/v1/projects/alpha/sessions/s1/events", json=SMALL_BATCH)
                assert_fault(response, "storage_busy", retry_after=True)
                assert response.headers["retry-after"] == "1"
            with pytest.raises(StorageBusy, match="beyond the busy timeout; retry"):
                service.append_events("alpha", "s1", SMALL_BATCH["events"])
            # A bound later than the busy timeout: the busy timeout ended the wait, and the message says so.
            later = time.monotonic() + 30
            with connection.lock_wait_bound(lambda: later), pytest.raises(StorageBusy, match="busy timeout; retry"):
                service.append_events("alpha", "s1", SMALL_BATCH["events"])
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        service.append_events("alpha", "s1", SMALL_BATCH["events"])


def test_a_write_under_a_lock_wait_bound_stops_waiting_at_its_bound(tmp_path: Path) -> None:
    """``lock_wait_bound``: a write waits for another process's lock, and for a writer of this process that is
    itself waiting out the busy timeout (30 s) on that lock, only until its bound; then ``storage_busy``,
    nothing written, with a message that names the bound, not the busy timeout, as what ended the wait. The
    pydantic-ai capability's close() bounds its appends this way."""
    bounded = "beyond the time this write could wait; retry"
    with Obsmem(load_settings(data_dir=tmp_path / "data")) as service:
        seed(service, "alpha", NOTES)
        database = service.database("alpha")
        holder = apsw.Connection(str(database.path))
        holder.execute("BEGIN IMMEDIATE")
        waiting = threading.Thread(target=service.append_events, args=("alpha", "s2", SMALL_BATCH["events"]))
        try:
            deadline = time.monotonic() + 0.3
            with connection.lock_wait_bound(lambda: deadline), pytest.raises(StorageBusy, match=bounded):
                service.append_events("alpha", "s1", SMALL_BATCH["events"])  # SQLite's busy handler gives up
            waiting.start()  # unbounded: holds this process's write lock while SQLite makes it wait
            for _ in range(1000):
                if not database._write_lock.acquire(blocking=False):
                    break
                database._write_lock.release()
                time.sleep(0.01)
            else:
                pytest.fail("the unbounded writer never took the process's write lock")
            deadline = time.monotonic() + 0.3
            with connection.lock_wait_bound(lambda: deadline), pytest.raises(StorageBusy, match=bounded):
                service.append_events("alpha", "s1", SMALL_BATCH["events"])  # the process's lock is not given
        finally:
            holder.execute("ROLLBACK")
            holder.close()
            if waiting.ident is not None:  # started
                waiting.join(timeout=60)
        assert service.session_status("alpha", "s1").last_seq == len(NOTES)  # neither bounded write stored
        assert service.session_status("alpha", "s2").last_seq == 1  # the unbounded one waited its turn
        with connection.lock_wait_bound(lambda: time.monotonic() + 5):  # a free lock: written at once
            service.append_events("alpha", "s1", SMALL_BATCH["events"])
        assert service.session_status("alpha", "s1").last_seq == len(NOTES) + 1


# -- a damaged file ------------------------------------------------------------------------------------------


def test_a_damaged_file_is_503_storage_corrupt_on_every_surface(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with Obsmem(data_dir=data_dir) as service:
        seed(service, "alpha", NOTES)
        path = service.database("alpha").path
    path.write_bytes(b"not a database at all" * 400)
    with Obsmem(load_settings(data_dir=data_dir)) as service:
        with TestClient(create_app(service), base_url=LOCAL, raise_server_exceptions=False) as client:
            for response in (
                client.get("/v1/projects/alpha/status"),
                client.post("/v1/projects/alpha/search", json={"query": "deploy"}),
                client.post("/v1/projects/alpha/sessions/s1/events", json=SMALL_BATCH),
            ):
                assert_fault(response, "storage_corrupt", retry_after=False)
            assert client.get("/v1/projects").status_code == 200
        outcome = run_tool(service, "alpha", "memory_search", {"query": "deploy"})
        assert outcome.text.startswith("storage_corrupt: ")
    result = CliRunner().invoke(cli, ["--data-dir", str(data_dir), "search", "alpha", "deploy"])
    assert result.exit_code == STORAGE_EXIT and "error: storage_corrupt: " in result.output


def test_concurrent_first_writes_create_one_database(tmp_path: Path) -> None:
    # Two registries (two processes' worth) race to create a project: both writes land in one file.
    first, second = Obsmem(data_dir=tmp_path / "data"), Obsmem(data_dir=tmp_path / "data")
    barrier = threading.Barrier(2)

    def write(service: Obsmem, session: str) -> None:
        barrier.wait()
        service.append_events("race", session, SMALL_BATCH["events"])

    threads = [threading.Thread(target=write, args=(first, "s1")), threading.Thread(target=write, args=(second, "s2"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert first.status("race").sessions == second.status("race").sessions == 2
    assert sorted(path.name for path in (tmp_path / "data" / "projects" / "race").iterdir() if "db" in path.name)[
        0
    ] == ("obsmem.db")
    assert not [
        path for path in (tmp_path / "data" / "projects" / "race").iterdir() if path.name.startswith(".building")
    ]
    first.close()
    second.close()


def test_a_creation_killed_half_way_is_cleaned_up_by_the_next_one(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])  # a process id that is surely gone once waited for
    gone.wait()
    directory = tmp_path / "data" / "projects" / "revived"
    directory.mkdir(parents=True)
    abandoned = directory / f".building-{gone.pid}-0badcafe.db"
    abandoned.write_bytes(b"half a database")
    mine = directory / f".building-{os.getpid()}-0badcafe.db"  # a live process's build is left alone
    mine.write_bytes(b"being built")
    with Obsmem(data_dir=tmp_path / "data") as service:
        assert service.project_names() == []  # a build in progress is never listed
        service.append_events("revived", "s1", SMALL_BATCH["events"])
        assert service.project_names() == ["revived"]
    assert not abandoned.exists() and mine.exists()


def test_a_file_where_a_project_or_user_directory_belongs_is_503_storage_error(tmp_path: Path) -> None:
    """A file in the place of a project's directory (or a user tier's): creating the database there failed
    with EEXIST, no storage fault, so a write answered 500 over HTTP and raised FileExistsError, naming the
    path, out of the agent tools (and with it out of an agent's run)."""
    data_dir = tmp_path / "data"
    with Obsmem(data_dir=data_dir) as service:
        service.append_events("p", "s1", [{"role": "user", "content": "hello"}])
        service.save_note("p", "the local account's tier exists", tier="user")
    (user_tier,) = (data_dir / "users").iterdir()
    shutil.rmtree(user_tier)
    user_tier.write_text("not a directory")
    (data_dir / "projects" / "q").write_text("not a directory")
    with Obsmem(data_dir=data_dir) as service:
        with TestClient(create_app(service), base_url=LOCAL, raise_server_exceptions=False) as client:
            for response in (
                client.post("/v1/projects/q/notes", json={"action": "save", "content": "deploys on Thursdays"}),
                client.post("/v1/projects/q/sessions/s1/events", json={"events": [{"role": "user", "content": "x"}]}),
                client.post("/v1/projects/p/notes", json={"action": "save", "content": "on Thursdays", "tier": "user"}),
            ):
                assert_fault(response, "storage_error", retry_after=False)
                assert "move it away" in response.json()["error"]["message"]
                assert str(tmp_path) not in response.json()["error"]["message"]
        for project, tier in (("q", "project"), ("p", "user")):
            arguments = {"action": "save", "content": "deploys on Thursdays", "tier": tier}
            outcome = run_tool(service, project, "memory", arguments)
            assert outcome.text.startswith("storage_error: ") and str(tmp_path) not in outcome.text


def test_a_file_where_the_graph_directory_belongs_is_503_storage_error(
    tmp_path: Path, model_server: ModelServer
) -> None:
    """A file in the place of a project's ``semantic/`` directory: making the directory fails with EEXIST and
    looking into it with ENOTDIR, neither of which was a storage fault, so hybrid search and status answered
    500 (the CLI, an io_error naming the path)."""
    data_dir = tmp_path / "data"
    with make_service(data_dir, model_server) as service:
        add_memories(service, "p", corpus(20))
        service.index("p")
        graph_dir = service.database("p").path.parent / "semantic"
    for path in graph_dir.iterdir():
        path.unlink()
    graph_dir.rmdir()
    graph_dir.write_text("not a directory")
    with make_service(data_dir, model_server) as service:
        with TestClient(create_app(service), base_url=LOCAL, raise_server_exceptions=False) as client:
            for response in (
                client.get("/v1/projects/p/status"),
                client.post("/v1/projects/p/search", json={"query": "auth clock", "mode": "hybrid"}),
            ):
                assert_fault(response, "storage_error", retry_after=False)
                assert "move it away" in response.json()["error"]["message"]
                assert str(tmp_path) not in response.json()["error"]["message"]
            exact = client.post("/v1/projects/p/search", json={"query": "auth", "mode": "exact"})
            assert exact.status_code == 200
        outcome = run_tool(service, "p", "memory_search", {"query": "auth clock"})
        assert outcome.text.startswith("storage_error: ")
