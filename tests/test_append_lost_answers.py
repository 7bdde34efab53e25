"""An append the server stored but whose answer the client never got (its timeout passed while the
database was busy) is sent again by the clients obsmem ships, and nothing is stored twice: they number
their events, and an identical event at a used seq is a duplicate (docs/http-api.md, appending safely).

The lost answer is made by a lock rather than by timing: another connection holds project ``p``'s write
lock, so the server's append waits in SQLite's busy handler (30 s) while the client's own timeout (a few
seconds) passes; the test releases the lock only once the client has given up, and the server then stores
the events it was sent. Every wait is a bounded poll of the server's answers, never a timed assertion.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw
import httpx
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from obsmem.app import Obsmem
from obsmem.pydantic_ai import ObservationalMemory, ObsmemClient
from obsmem.settings import load_settings
from support.http_server import live_server, wait_until_stored
from support.pydantic_ai_runs import history_events, stored_events

pytestmark = pytest.mark.timeout(180)

# The client gives up long before the server's busy timeout (30 s) ends the append it is waiting on.
CLIENT_TIMEOUT_SECONDS = 3.0
EVENTS_URL = "/v1/projects/p/sessions/s1/events"


@contextmanager
def write_locked(data: Path, base: str) -> Iterator[apsw.Connection]:
    """Project ``p`` (made with an event in another session, and opened by the server at ``base``: opening a
    database checks its migrations under the write lock) with its write lock held by a connection of the
    test's own: readers go on (WAL), and every writer waits until :func:`release` lets it through."""
    with Obsmem(load_settings(data_dir=data)) as service:
        service.append_events("p", "other", [{"role": "user", "content": "makes the project"}])
        database = service.projects.database_path("p")
    assert httpx.get(f"{base}/v1/projects/p/sessions/other/status", timeout=30.0).status_code == 200
    lock = apsw.Connection(str(database))
    lock.execute("BEGIN IMMEDIATE")
    try:
        yield lock
    finally:
        release(lock)
        lock.close()


def release(lock: apsw.Connection) -> None:
    if lock.in_transaction:
        lock.execute("ROLLBACK")


def stored(data: Path) -> list[tuple[Any, ...]]:
    with Obsmem(load_settings(data_dir=data)) as service:
        return stored_events(service)


def test_the_capability_sends_an_append_whose_answer_was_lost_again_without_storing_it_twice(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    with live_server(data) as base, write_locked(data, base) as lock:
        client = ObsmemClient(base, timeout_seconds=CLIENT_TIMEOUT_SECONDS)
        om = ObservationalMemory(client, project="p", session_id="s1", tools=False)

        def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            # Called after the run's first append, which the request waits for: the client gave up on it
            # while the server still waits for the lock. Let the server store it, then answer.
            release(lock)
            wait_until_stored(base, 1)
            return ModelResponse(parts=[TextPart("the login test passes now")])

        agent = Agent(FunctionModel(model), capabilities=[om])
        with caplog.at_level(logging.WARNING, logger="obsmem.pydantic_ai"):
            result = asyncio.run(agent.run("the login test fails with KeyError: user_id"))
            om.close()  # waits for the append of the run's end, which sends the lost append again
        client.close()

    lost = [r for r in caplog.records if "append to session failed (service_unavailable)" in r.getMessage()]
    assert lost, "the client's first append was expected to time out while the database was locked"
    assert stored(data) == history_events(result.all_messages())  # the prompt once, then the answer


def test_an_append_with_seqs_sent_again_after_its_answer_was_lost_is_a_duplicate(tmp_path: Path) -> None:
    data = tmp_path / "data"
    events = [
        {"seq": 1, "role": "user", "content": "the login test fails with KeyError: user_id"},
        {"seq": 2, "role": "assistant", "content": "looking at tests/test_login.py"},
    ]
    with live_server(data) as base, write_locked(data, base) as lock:
        with pytest.raises(httpx.TimeoutException):
            httpx.post(f"{base}{EVENTS_URL}", json={"events": events}, timeout=CLIENT_TIMEOUT_SECONDS)
        release(lock)
        wait_until_stored(base, 2)
        again = httpx.post(f"{base}{EVENTS_URL}", json={"events": events}, timeout=30.0)

    assert again.status_code == 200
    assert again.json() == {"appended": 0, "duplicates": 2, "last_seq": 2}
    assert [row[:4] for row in stored(data)] == [
        (1, "user", "message", events[0]["content"]),
        (2, "assistant", "message", events[1]["content"]),
    ]
