"""``flush`` and ``close`` over HTTP against a server that does not answer (docs/pydantic-ai.md, When no request
follows): flush keeps one deadline over all its steps, and an unsent batch is logged once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

from obsmem.pydantic_ai import ObservationalMemory, ObsmemClient
from support.http_server import free_port

pytestmark = pytest.mark.timeout(120)

HISTORY: list[ModelMessage] = [
    ModelRequest(parts=[UserPromptPart("the login test fails with KeyError: user_id")]),
    ModelResponse(parts=[TextPart("the fixture sets user_id after the request")]),
]


@contextlib.contextmanager
def silent_server() -> Iterator[str]:
    """A loopback TCP server that accepts every connection and never reads or answers; yields its base URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stop = threading.Event()
    accepted: list[socket.socket] = []

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                accepted.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()
        for connection in accepted:
            connection.close()


def with_history(client: ObsmemClient) -> ObservationalMemory:
    """A capability whose run's history (two events) the store has not confirmed: what flush sends again."""
    om = ObservationalMemory(client, project="p", session_id="s1", tools=False)
    om.ledger.update(HISTORY)
    return om


def test_flush_keeps_its_timeout_against_a_server_that_never_answers(tmp_path: Path) -> None:
    # After its appends, flush's observation request, projection read and event reads were bounded by the
    # client's timeout (30 s) alone, each: flush(5) took about 65 s. Now every step has only the time left.
    with silent_server() as base:
        client = ObsmemClient(base)  # the default 30 s per call
        om = with_history(client)
        try:
            started = time.monotonic()
            projection = asyncio.run(asyncio.wait_for(om.flush(1), 20))
            took = time.monotonic() - started
        finally:
            om.close(0)
            client.close()
    assert took < 3.0, f"flush(1) took {took:.1f} s"
    assert projection.observed_through_seq == 0 and om.unsent == 2


def test_an_unsent_batch_is_logged_once_by_flush_then_close(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # flush() and then close() each logged the same unsent events: one batch, one warning; still counted.
    client = ObsmemClient(f"http://127.0.0.1:{free_port()}")  # nothing listens: refused at once
    om = with_history(client)
    try:
        with caplog.at_level(logging.WARNING, logger="obsmem.pydantic_ai"):
            asyncio.run(om.flush(1))
            om.close(1)
    finally:
        client.close()
    unsent = [record.getMessage() for record in caplog.records if "unsent" in record.getMessage()]
    assert unsent == [
        "session 's1': 2 events unsent (service_unavailable); a later run that continues the session "
        "with its message_history sends them again"
    ]
    assert om.unsent == 2
