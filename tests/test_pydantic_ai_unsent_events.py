"""The run's last append fails (the server went away, the database cannot be written) and no model request
follows to send it again: ``close()`` (and ``flush()``) send what the store lacks again, a bounded number of
times within a bounded time, and when it still cannot be stored they say so (docs/pydantic-ai.md, "What is
appended, and when"): a warning naming the session and how many events, never their text, and
``unsent``.

The server is a real ``obsmem serve`` on loopback that the agent's model stops mid-run (and the test starts
again on the same port); embedded, a real SQLite file whose writes fail through the tests' failing VFS.
Every wait is bounded; nothing asserts on time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import apsw
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from obsmem.app import Obsmem
from obsmem.errors import ObsmemError
from obsmem.pydantic_ai import ObservationalMemory, ObsmemClient
from obsmem.pydantic_ai.backends import APPEND_BODY_BYTES, RemoteMemory
from obsmem.settings import load_settings
from support.http_server import free_port, live_server, wait_until_stored
from support.pydantic_ai_runs import history_events, stored_events
from support.storage_faults import failing_vfs

pytestmark = pytest.mark.timeout(180)

PROMPT = "the login test fails with KeyError: user_id"
ANSWER = "the fixture never sets user_id; added it to conftest.py"
FAILED_DEADLINE_SECONDS = 30.0


def stored(data: Path) -> list[tuple[Any, ...]]:
    with Obsmem(load_settings(data_dir=data)) as service:
        return stored_events(service)


def wait_for_failed_append(caplog: pytest.LogCaptureFixture) -> None:
    """Poll the log until the append of the run's end has failed (bounded)."""
    deadline = time.monotonic() + FAILED_DEADLINE_SECONDS
    while time.monotonic() < deadline:
        if any("append to session failed" in record.getMessage() for record in caplog.records):
            return
        time.sleep(0.02)
    pytest.fail("the append of the run's end never failed")


def unsent_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and " unsent (" in r.getMessage()]


def answering_agent(om: ObservationalMemory, during_request: Any) -> Agent[None, str]:
    """An agent whose model, called once the run's prompt is stored, runs ``during_request`` and answers."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        during_request()
        return ModelResponse(parts=[TextPart(ANSWER)])

    return Agent(FunctionModel(model), capabilities=[om])


@pytest.mark.parametrize("ending", ["close", "flush"])
def test_the_runs_last_events_are_stored_once_the_server_is_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, ending: str
) -> None:
    data, port = tmp_path / "data", free_port()
    with contextlib.ExitStack() as first_server:
        base = first_server.enter_context(live_server(data, port=port))
        client = ObsmemClient(base, timeout_seconds=10.0)
        om = ObservationalMemory(client, project="p", session_id="s1", tools=False)
        # The server goes away after the run's prompt was stored: the answer's append at the run's end fails.
        agent = answering_agent(om, first_server.close)
        with caplog.at_level(logging.WARNING, logger="obsmem.pydantic_ai"):
            result = asyncio.run(agent.run(PROMPT))
            wait_for_failed_append(caplog)
            assert stored(data) == history_events(result.all_messages())[:1]  # the prompt alone
            with live_server(data, port=port):  # the server is back where the client expects it
                # No model request follows to send the answer again: flush, or close, does.
                if ending == "flush":
                    asyncio.run(om.flush(30))
                    assert stored(data) == history_events(result.all_messages())
                om.close()
        client.close()

    assert stored(data) == history_events(result.all_messages())  # the prompt, then the answer
    assert om.unsent == 0
    assert unsent_warnings(caplog) == []


def test_close_says_how_many_events_were_not_stored_when_the_server_stays_away(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    with contextlib.ExitStack() as server:
        base = server.enter_context(live_server(data))
        client = ObsmemClient(base, timeout_seconds=10.0)
        om = ObservationalMemory(client, project="p", session_id="s1", tools=False)
        agent = answering_agent(om, server.close)
        with caplog.at_level(logging.WARNING, logger="obsmem.pydantic_ai"):
            result = asyncio.run(agent.run(PROMPT))
            wait_for_failed_append(caplog)
            om.close()  # the server never comes back: close gives up within its bound
        client.close()

    warnings = unsent_warnings(caplog)
    assert warnings == [
        "session 's1': 1 event unsent (service_unavailable); a later run that continues the session with its "
        "message_history sends it again"
    ]
    assert all(PROMPT not in r.getMessage() and ANSWER not in r.getMessage() for r in caplog.records)
    assert om.unsent == 1  # the answer
    assert stored(data) == history_events(result.all_messages())[:1]


def test_close_gives_up_in_its_time_on_a_database_another_writer_keeps_locked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    with Obsmem(load_settings(data_dir=data)) as service:
        service.append_events("p", "other", [{"role": "user", "content": "makes the project"}])
        database = service.projects.database_path("p")
    lock = apsw.Connection(str(database))
    lock.set_busy_timeout(30_000)
    with live_server(data) as base:
        # The client gives up on an append long before the server's busy timeout (30 s) would end it.
        client = ObsmemClient(base, timeout_seconds=3.0)
        om = ObservationalMemory(client, project="p", session_id="s1", tools=False)

        def take_the_lock() -> None:  # another writer (a backup, an import) holds the lock from now on
            lock.execute("BEGIN IMMEDIATE")

        agent = answering_agent(om, take_the_lock)
        try:
            with caplog.at_level(logging.WARNING, logger="obsmem.pydantic_ai"):
                result = asyncio.run(agent.run(PROMPT))
                om.close()  # every attempt waits on the lock: close returns in its time, and says so
        finally:
            if lock.in_transaction:
                lock.execute("ROLLBACK")
            lock.close()
        # The server still holds appends it was waiting on; let them through before it stops.
        wait_until_stored(base, 2)
        client.close()

    warnings = unsent_warnings(caplog)
    assert len(warnings) == 1 and warnings[0].startswith("session 's1': 1 event unsent (")
    assert om.unsent == 1  # not confirmed: the server stored the answer only after close gave up
    assert stored(data) == history_events(result.all_messages())  # stored once, for all the attempts


@pytest.mark.parametrize("recovers", [True, False], ids=["writes-again", "still-failing"])
def test_an_embedded_memory_whose_disk_fails_at_the_runs_end(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, recovers: bool
) -> None:
    data = tmp_path / "data"
    with failing_vfs() as vfs, Obsmem(load_settings(data_dir=data)) as memory:
        om = ObservationalMemory(memory, project="p", session_id="s1", tools=False, start_workers=False)

        def disk_fails() -> None:
            vfs.fail_writes = True

        agent = answering_agent(om, disk_fails)
        with caplog.at_level(logging.WARNING, logger="obsmem.pydantic_ai"):
            result = asyncio.run(agent.run(PROMPT))
            wait_for_failed_append(caplog)
            vfs.fail_writes = not recovers
            om.close()
        vfs.fail_writes = False
        held = stored_events(memory)

    expected = history_events(result.all_messages())
    if recovers:
        assert held == expected
        assert om.unsent == 0 and unsent_warnings(caplog) == []
    else:
        assert held == expected[:1]
        assert om.unsent == 1
        assert len(unsent_warnings(caplog)) == 1 and "'s1'" in unsent_warnings(caplog)[0]


class _SlowAppends(BaseHTTPRequestHandler):
    """Answers each append after ``DELAY_SECONDS``, well within the client's timeout, and counts the answers
    it wrote before the client hung up."""

    DELAY_SECONDS = 1.0
    answered: list[int] = []

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server naming
        self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(self.DELAY_SECONDS)
        body = b"{}"
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the client hung up
            return
        _SlowAppends.answered.append(1)


def test_an_attempts_time_left_bounds_every_part_of_a_split_append_together() -> None:
    """close()'s attempt gives an append the time left before its deadline. An append too large for one body
    goes in parts, and that time bounds the parts together: given it per part, three parts of a slow server
    took three times the time left, and close's deadline did not hold. Here 2.5 s cover two answers of 1 s,
    not three, so the append gives up (the parts before stay stored, answered as duplicates when sent again)."""
    _SlowAppends.answered.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowAppends)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    client = ObsmemClient(f"http://127.0.0.1:{server.server_address[1]}", timeout_seconds=30.0)
    # Each event is more than half a body, so each goes alone: three requests.
    events = [{"seq": seq, "role": "tool_result", "content": "x" * (APPEND_BODY_BYTES * 2 // 3)} for seq in (1, 2, 3)]
    try:
        with pytest.raises(ObsmemError) as failure:
            RemoteMemory(client, "p", "s1").append(events, timeout=2.5)
        assert failure.value.code == "service_unavailable"
        assert len(_SlowAppends.answered) < len(events)
    finally:
        client.close()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class _Unavailable(BaseHTTPRequestHandler):
    """What a proxy in front of a restarting server answers: 503, with obsmem's error body, to everything."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
        pass

    def _unavailable(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = b'{"error": {"code": "storage_busy", "message": "the database stayed locked; retry"}}'
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Retry-After", "1")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = _unavailable  # noqa: N815 - http.server naming


@contextlib.contextmanager
def answering_503(port: int) -> Any:
    server = ThreadingHTTPServer(("127.0.0.1", port), _Unavailable)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


OBSERVED = "User's login test fails on a missing user_id"


@pytest.mark.parametrize("away", ["stopped", "503"])
def test_flush_while_the_server_is_away_keeps_the_memory_read_last_and_counts_what_is_unsent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, away: str
) -> None:
    """flush() sends what is unsent and reads the memory again; with the server away (nothing listening, or a
    503 in front of it) it raised service_unavailable out of that read, although model requests go on with the
    memory read last and close() counts what it could not send. It now does both: it returns the memory it
    read last, and the events it could not send stay in ``unsent`` with one warning by count."""
    data, port = tmp_path / "data", free_port()
    client = ObsmemClient(f"http://127.0.0.1:{port}", timeout_seconds=5.0)
    om = ObservationalMemory(client, project="p", session_id="s1", tools=False)
    agent = answering_agent(om, lambda: None)
    with live_server(data, port=port):
        first = asyncio.run(agent.run(PROMPT))
        asyncio.run(om.flush(5))
    with Obsmem(load_settings(data_dir=data)) as service:  # an observation of the first run, while it is stopped
        item = {"session_id": "s1", "content": OBSERVED, "timestamp": "2026-01-05 09:00", "source_refs": [1]}
        assert not service.add_observations("p", [item]).rejected
    with live_server(data, port=port):
        before = asyncio.run(om.flush(5))
    assert OBSERVED in before.text

    with contextlib.ExitStack() as outage:
        if away == "503":
            outage.enter_context(answering_503(port))
        with caplog.at_level(logging.WARNING, logger="obsmem.pydantic_ai"):
            second = asyncio.run(agent.run("and the logout test?", message_history=first.all_messages()))
            after = asyncio.run(om.flush(2))
            assert after == before
            assert om.unsent == 2  # the second run's prompt and answer
            om.close(timeout=1)
    client.close()

    warnings = unsent_warnings(caplog)
    assert len(warnings) == 1 and warnings[0].startswith("session 's1': 2 events unsent (")  # flush, not close too
    assert all(PROMPT not in r.getMessage() and OBSERVED not in r.getMessage() for r in caplog.records)
    assert stored(data) == history_events(second.all_messages())[:2]


def append_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith("obsmem-append")]


@pytest.mark.parametrize("workers", [False, True], ids=["no-workers", "workers"])
def test_close_ends_an_embedded_append_waiting_on_another_writers_lock_in_its_time(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, workers: bool
) -> None:
    """Embedded, the run's last append waits for a database another writer keeps locked. close() returned in
    its time, but the append went on waiting on its thread for up to the busy timeout (30 s), past close and
    into the interpreter's exit, and stored the answer after close had counted it unsent. Now it stops
    waiting at close's deadline: close returns with its append thread ended, the answer is counted unsent
    and logged by count, and nothing is stored behind close's back. (With the workers running, a worker's
    own write may be the one waiting out the busy timeout, holding the process's write lock meanwhile.)"""
    data = tmp_path / "data"
    with Obsmem(load_settings(data_dir=data)) as service:
        service.append_events("p", "other", [{"role": "user", "content": "makes the project"}])
        database = service.projects.database_path("p")
    lock = apsw.Connection(str(database))
    try:
        with Obsmem(load_settings(data_dir=data)) as memory:
            om = ObservationalMemory(memory, project="p", session_id="s1", tools=False, start_workers=workers)

            def take_the_lock() -> None:  # another writer (a backup, an import) holds the lock from now on
                lock.execute("BEGIN IMMEDIATE")

            agent = answering_agent(om, take_the_lock)
            with caplog.at_level(logging.WARNING, logger="obsmem.pydantic_ai"):
                result = asyncio.run(agent.run(PROMPT))
                om.close(timeout=1.0)  # the lock is held far longer than that
            assert append_threads() == []  # no append of the capability outlives close
            assert om.unsent == 1  # the answer
            lock.execute("ROLLBACK")
            assert stored_events(memory) == history_events(result.all_messages())[:1]  # the prompt alone
    finally:
        if lock.in_transaction:
            lock.execute("ROLLBACK")
        lock.close()

    warnings = unsent_warnings(caplog)
    assert warnings == [
        "session 's1': 1 event unsent (storage_busy); a later run that continues the session with its "
        "message_history sends it again"
    ]
    assert all(PROMPT not in r.getMessage() and ANSWER not in r.getMessage() for r in caplog.records)
