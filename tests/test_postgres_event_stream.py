"""The HTTP event stream on PostgreSQL is pushed, not polled: a follower on one server sees an event recorded
through another server on the same database promptly (LISTEN/NOTIFY), and reads the log only when woken."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from obsmem.app import Obsmem
from obsmem.settings import load_settings
from obsmem.surfaces.http import create_app
from obsmem.work import eventlog

PROMPT_SECONDS = 2.0  # well under the stream's 5 s recheck: only the push delivers this fast
IDLE_SECONDS = 2.0


def _service(tmp_path: Path, dsn: str) -> Obsmem:
    return Obsmem(
        load_settings(data_dir=tmp_path, storage={"backend": "postgres", "dsn": dsn}, jobs={"in_server": False})
    )


def _wait_for(condition: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


class LiveServer:
    """One uvicorn server on loopback in a thread, for one service."""

    def __init__(self, service: Obsmem) -> None:
        config = uvicorn.Config(create_app(service), host="127.0.0.1", port=0, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        _wait_for(lambda: self.server.started, timeout=20)
        self.base = f"http://127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


@pytest.fixture
def two_servers(tmp_path: Path, postgres_dsn: str) -> Iterator[tuple[Obsmem, LiveServer, Obsmem]]:
    first, second = _service(tmp_path / "a", postgres_dsn), _service(tmp_path / "b", postgres_dsn)
    server = LiveServer(first)
    try:
        yield first, server, second
    finally:
        server.stop()
        first.close()
        second.close()


def _follow(base: str, lines: queue.Queue[str], stop: threading.Event) -> None:
    with (
        httpx.Client(timeout=httpx.Timeout(5.0, read=30.0)) as client,
        client.stream("GET", f"{base}/v1/projects/p/events", headers={"Accept": "text/event-stream"}) as stream,
    ):
        lines.put(f"status: {stream.status_code}")
        for line in stream.iter_lines():
            lines.put(line)
            if stop.is_set():
                return


def _next_event_id(lines: queue.Queue[str], timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        if line.startswith("id:"):
            return int(line.removeprefix("id:").strip())


def _record_through(service: Obsmem, kind: str) -> int:
    with service.store.get("p").write() as conn:  # type: ignore[attr-defined]
        return eventlog.record(conn, "job_failed", data={"kind": kind, "attempts": 1, "reason": "scripted"})


def test_a_follower_on_one_server_sees_an_event_recorded_through_another_at_once(
    two_servers: tuple[Obsmem, LiveServer, Obsmem],
) -> None:
    first, server, second = two_servers
    first.append_events("p", "s1", [{"role": "user", "content": "hello"}])  # the project exists
    reads = 0
    real_read = first.pipeline_events

    def counted_read(*args: Any, **kwargs: Any) -> list[eventlog.LoggedEvent]:
        nonlocal reads
        reads += 1
        return real_read(*args, **kwargs)

    first.pipeline_events = counted_read  # type: ignore[method-assign]
    lines: queue.Queue[str] = queue.Queue()
    stop = threading.Event()
    follower = threading.Thread(target=_follow, args=(server.base, lines, stop), daemon=True)
    follower.start()
    try:
        assert lines.get(timeout=10) == "status: 200"
        _wait_for(lambda: reads >= 2, timeout=5)  # the 404 check, then the stream's first read
        before_idle = reads
        time.sleep(IDLE_SECONDS)
        # Polling read the log every 0.25 s; the pushed stream waits without reading.
        assert reads - before_idle <= 1

        for round_ in range(3):
            started = time.monotonic()
            recorded = _record_through(second, f"round{round_}")
            assert _next_event_id(lines, timeout=10) == recorded
            assert time.monotonic() - started < PROMPT_SECONDS
    finally:
        stop.set()
