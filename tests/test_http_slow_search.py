"""A slow read holds up no other request: a search of the conversation and a recall run in the threadpool,
not on the server's event loop, so while one waits (here: for a database another process keeps locked) the
server still answers everyone else. (A recall of an id that matches no memory hashes every event not indexed
yet, about 0.3 s for 100,000 of them.)

The wait is made by a lock rather than by data: the search stays in flight for exactly as long as the
test holds the lock, on any machine. That it is in flight is shown by the server itself: with room for two
requests, two searches waiting make it refuse a third request with ``over_capacity``, which a server whose
event loop is held by a search could not answer at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import apsw
import httpx
import pytest

from obsmem.app import Obsmem
from obsmem.settings import load_settings
from support.http_server import live_server

pytestmark = pytest.mark.timeout(180)

# Well under the server's 30 s busy timeout: a health request that waits this long was held up by a search.
ANSWER_SECONDS = 15.0
# Under the busy timeout too: past it the waiting requests give up with ``busy``, and the probe would report
# a request that finished rather than the server that never had both in flight.
PROBE_DEADLINE_SECONDS = 25.0
CONTENT = "the login test fails with KeyError: user_id"
UNKNOWN_ID = "0123456789ab"  # matches nothing: the recall compares every event not indexed yet


def search(base: str) -> httpx.Response:
    body = {"query": "KeyError", "scope": "conversation"}
    return httpx.post(f"{base}/v1/projects/p/search", json=body, timeout=60.0)


def recall(base: str) -> httpx.Response:
    return httpx.get(f"{base}/v1/projects/p/memories/{UNKNOWN_ID}", timeout=60.0)


def health(base: str) -> httpx.Response:
    try:
        return httpx.get(f"{base}/v1/health", timeout=ANSWER_SECONDS)
    except httpx.TimeoutException:
        pytest.fail("GET /v1/health got no answer while a request was waiting: that request holds the event loop")


def refused_while(base: str, *waiting: Future[httpx.Response]) -> httpx.Response:
    """The first health answer that is ``503``: both of the server's two request slots are taken."""
    deadline = time.monotonic() + PROBE_DEADLINE_SECONDS
    while time.monotonic() < deadline:
        assert not any(future.done() for future in waiting), "a request finished while the database was locked"
        answer = health(base)
        if answer.status_code == 503:
            return answer
        time.sleep(0.05)
    pytest.fail("the server never had both requests in flight")


def locked(data: Path) -> apsw.Connection:
    """A connection holding project ``p``'s database in exclusive locking mode (no one else has it open):
    every other connection waits in its busy handler until this one closes."""
    with Obsmem(load_settings(data_dir=data)) as service:
        service.append_events("p", "s1", [{"role": "user", "content": CONTENT}])
        database = service.projects.database_path("p")
    lock = apsw.Connection(str(database))
    lock.execute("PRAGMA locking_mode=EXCLUSIVE")
    lock.execute("BEGIN EXCLUSIVE")
    return lock


def answers_while_waiting(tmp_path: Path, request: Callable[[str], httpx.Response]) -> list[httpx.Response]:
    """Two of ``request`` sent while project ``p``'s database is locked: health still answers while they wait
    (200 with one in flight, ``over_capacity`` with both), and both answer once the lock goes."""
    data = tmp_path / "data"
    lock = locked(data)
    settings = {"max_in_flight": 2, "max_stream_followers": 1, "extra": "[jobs]\nin_server = false\n"}
    with live_server(data, **settings) as base, ThreadPoolExecutor(2) as pool:  # type: ignore[arg-type]
        try:
            first = pool.submit(request, base)
            assert health(base).status_code == 200
            second = pool.submit(request, base)
            refusal = refused_while(base, first, second)
            assert refusal.json()["error"]["code"] == "over_capacity"
        finally:
            lock.close()  # rolls back: the requests (and the threads waiting on them) go on at once
        answers = [first.result(timeout=60), second.result(timeout=60)]
        assert health(base).status_code == 200
    return answers


def test_health_answers_while_recalls_wait(tmp_path: Path) -> None:
    for answer in answers_while_waiting(tmp_path, recall):
        assert answer.status_code == 404, answer.text
        assert answer.json()["error"]["code"] == "not_found"


def test_health_answers_while_conversation_searches_wait(tmp_path: Path) -> None:
    for answer in answers_while_waiting(tmp_path, search):
        assert answer.status_code == 200, answer.text
        assert [hit["content"] for hit in answer.json()["hits"]] == [CONTENT]
