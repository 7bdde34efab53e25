"""Connection hygiene on a real server over loopback sockets: 5xx closes cleanly, deadlines, caps, rate limits.

Every wait is bounded (socket timeouts, short configured deadlines); nothing here is a timing measurement.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import anyio
import apsw
import httpx
import pytest
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from obsmem.app import Obsmem
from obsmem.settings.main import ApiKey
from obsmem.surfaces.http import create_app
from obsmem.surfaces.http.access_log import loggable_target
from obsmem.surfaces.http.closing import CloseOnServerError
from obsmem.surfaces.http.protocol import protocol_class
from obsmem.surfaces.http.ratelimit import FailureLimiter
from support.http_server import (
    ALPHA_NOTES,
    KEY_ALPHA,
    KEYS,
    WRONG_KEY,
    bearer,
    free_port,
    live_server,
    seed,
    settings_for,
)

HEAD = "Host: 127.0.0.1\r\n"
SSE = {"Accept": "text/event-stream"}


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    with Obsmem(settings_for(tmp_path)) as service:
        seed(service, "alpha", ALPHA_NOTES)
    return tmp_path / "data"


def address(base: str) -> tuple[str, int]:
    host, port = base.removeprefix("http://").split(":")
    return host, int(port)


@contextlib.contextmanager
def connection(base: str, timeout: float = 10.0) -> Iterator[socket.socket]:
    with socket.create_connection(address(base), timeout=timeout) as sock:
        yield sock


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One whole response with a Content-Length body: status, headers (lowercased names), body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before the response head: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    length = int(headers["content-length"])
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed in the middle of the response body"
        body += chunk
    assert len(body) == length
    return int(lines[0].split(" ", 2)[1]), headers, body


def closed_cleanly(sock: socket.socket) -> bool:
    """True when the peer ends the connection with an orderly close (EOF), not a reset."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return False


def break_sessions_table(data_dir: Path, project: str = "alpha") -> None:
    """A genuinely broken database: a valid SQLite file whose ``sessions`` table is gone."""
    conn = apsw.Connection(str(data_dir / "projects" / project / "obsmem.db"))
    try:
        conn.execute("DROP TABLE sessions")
    finally:
        conn.close()


def test_an_unexpected_500_arrives_whole_closes_the_connection_and_the_next_connection_works(data_dir: Path) -> None:
    break_sessions_table(data_dir)
    with live_server(data_dir) as base:
        with connection(base) as sock:
            sock.sendall(f"GET /v1/projects/alpha/status HTTP/1.1\r\n{HEAD}\r\n".encode())
            status, headers, body = read_response(sock)
            assert status >= 500
            assert headers["connection"] == "close"
            error = json.loads(body)["error"]
            assert error["code"] and "sessions" not in error["message"]  # no internals in the answer
            assert closed_cleanly(sock)
        with connection(base) as sock:  # a fresh connection: kept alive across requests as usual
            sock.sendall(f"GET /v1/health HTTP/1.1\r\n{HEAD}\r\n".encode())
            assert read_response(sock)[0] == 200
            sock.sendall(f"GET /v1/projects/alpha/sessions/s1/memory HTTP/1.1\r\n{HEAD}\r\n".encode())
            status, headers, body = read_response(sock)
            assert status == 200 and "connection" not in headers
            assert json.loads(body)["observations"] == len(ALPHA_NOTES)


def test_a_body_that_stops_arriving_gets_408_and_the_connection_is_closed(data_dir: Path) -> None:
    with live_server(data_dir, body_timeout_seconds=0.5) as base:
        with connection(base) as sock:
            request = (
                f"POST /v1/projects/alpha/search HTTP/1.1\r\n{HEAD}Content-Type: application/json\r\n"
                "Content-Length: 100\r\n\r\n"
                '{"query": '
            )
            sock.sendall(request.encode())
            started = time.monotonic()
            status, headers, body = read_response(sock)
            assert status == 408 and headers["connection"] == "close"
            assert json.loads(body)["error"] == {
                "code": "request_timeout",
                "message": "the request body did not arrive within 0.5 s",
                "field": "body",
            }
            assert time.monotonic() - started < 8
            assert closed_cleanly(sock)
        assert httpx.post(f"{base}/v1/projects/alpha/search", json={"query": "gpt-4"}).status_code == 200


def test_silent_connections_and_unfinished_heads_are_not_held(data_dir: Path) -> None:
    with live_server(data_dir, keep_alive_seconds=0.5, header_timeout_seconds=0.5) as base:
        with connection(base) as silent:
            assert closed_cleanly(silent)  # nothing sent: closed after keep_alive_seconds
        with connection(base) as slow:
            slow.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0")  # the head never ends
            status, headers, body = read_response(slow)
            assert status == 408 and headers["connection"] == "close"
            assert json.loads(body)["error"]["code"] == "request_timeout"
            assert closed_cleanly(slow)
        with connection(base) as kept:
            kept.sendall(f"GET /v1/health HTTP/1.1\r\n{HEAD}\r\n".encode())
            assert read_response(kept)[0] == 200
            kept.sendall(b"GET /v1/health HTTP/1.1\r\n")  # a second request that stalls mid-head
            assert read_response(kept)[0] == 408


# Requests no HTTP/1.1 parser accepts: framing a client got wrong, or a request smuggling attempt.
MALFORMED = [
    b"POST /v1/projects/alpha/search HTTP/1.1\r\nHost: x\r\nContent-Length: 14\r\nContent-Length: 15\r\n\r\n{}",
    b"POST /v1/projects/alpha/search HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n{}",
    b"POST /v1/projects/alpha/search HTTP/1.1\r\nHost: x\r\nContent-Length: 0x0e\r\n\r\n{}",
    b"POST /v1/projects/alpha/search HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n{}\r\n0\r\n\r\n",
    b"GET /v1/health HTTP/1.1\r\nHost: x\r\nBad Header Name: 1\r\n\r\n",
    b"GET /v1/he alth HTTP/1.1\r\nHost: x\r\n\r\n",
]


def assert_invalid_http_answers(base: str) -> None:
    for request in MALFORMED:
        with connection(base) as sock:
            sock.sendall(request)
            status, headers, body = read_response(sock)
            assert status == 400 and headers["content-type"] == "application/json", (request, body)
            assert json.loads(body)["error"]["code"] == "invalid_http"
            assert headers["connection"] == "close" and closed_cleanly(sock)
    assert httpx.get(f"{base}/v1/health").status_code == 200


def test_a_request_that_is_not_valid_http_gets_400_invalid_http_and_a_clean_close(data_dir: Path) -> None:
    with live_server(data_dir) as base:
        assert_invalid_http_answers(base)


def test_requests_beyond_the_connection_cap_get_503_until_connections_close(data_dir: Path) -> None:
    with live_server(data_dir, max_connections=4, keep_alive_seconds=30) as base, contextlib.ExitStack() as stack:
        idle = [stack.enter_context(connection(base)) for _ in range(6)]
        time.sleep(0.3)  # let the server accept them all
        with connection(base) as sock:
            sock.sendall(f"GET /v1/health HTTP/1.1\r\n{HEAD}\r\n".encode())
            status, headers, body = read_response(sock)
            assert status == 503 and headers["connection"] == "close" and headers["retry-after"] == "1"
            assert json.loads(body)["error"]["code"] == "over_capacity"
            assert closed_cleanly(sock)
        for sock in idle:
            sock.close()
        deadline = time.monotonic() + 10
        while httpx.get(f"{base}/v1/health").status_code != 200:
            assert time.monotonic() < deadline, "the server did not recover after the connections closed"
            time.sleep(0.1)


def test_requests_beyond_the_in_flight_cap_get_503(data_dir: Path) -> None:
    with live_server(data_dir, max_in_flight=3, max_stream_followers=2) as base, httpx.Client(timeout=10) as client:
        url = f"{base}/v1/projects/alpha/events"
        with client.stream("GET", url, headers=SSE) as first, client.stream("GET", url, headers=SSE) as second:
            assert first.status_code == second.status_code == 200
            # Streams alone never fill the cap: the last slot still serves an ordinary request.
            assert httpx.get(f"{base}/v1/projects", timeout=10).json() == {"projects": ["alpha"]}
            with connection(base) as slow:
                # A request whose body has not arrived holds the last slot while it waits for it.
                slow.sendall(
                    b"POST /v1/projects/alpha/search HTTP/1.1\r\n"
                    + HEAD.encode()
                    + b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
                )
                deadline = time.monotonic() + 10
                while (refused := httpx.get(f"{base}/v1/projects", timeout=10)).status_code == 200:
                    assert time.monotonic() < deadline, "the waiting request never took the last slot"
                    time.sleep(0.05)
                assert refused.status_code == 503 and refused.json()["error"]["code"] == "over_capacity"
                assert refused.headers["retry-after"] == "1" and refused.headers["connection"] == "close"
        assert httpx.get(f"{base}/v1/projects", timeout=10).json() == {"projects": ["alpha"]}


def test_idle_streams_end_cleanly_and_followers_are_capped(data_dir: Path) -> None:
    with live_server(data_dir, stream_idle_seconds=1.0, max_stream_followers=1) as base:
        changed = httpx.put(f"{base}/v1/projects/alpha/models", json={"observer": {"model_id": "m1"}})
        assert changed.status_code == 200  # one pipeline event to deliver
        started = time.monotonic()
        with httpx.stream("GET", f"{base}/v1/projects/alpha/events", headers=SSE, timeout=10) as stream:
            assert stream.status_code == 200
            for url, headers in ((f"{base}/v1/projects/alpha/events", SSE), (f"{base}/mcp/alpha", SSE)):
                refused = httpx.get(url, headers=headers, timeout=10)
                assert refused.status_code == 503 and refused.json()["error"]["code"] == "too_many_streams"
                assert int(refused.headers["retry-after"]) >= 1
            received = b"".join(stream.iter_raw())  # ends by itself: a complete chunked response
        assert b"event: om_model_changed" in received
        assert 1.0 <= time.monotonic() - started < 9
        started = time.monotonic()
        mcp_headers = {"Accept": "text/event-stream, application/json"}
        with httpx.stream("GET", f"{base}/mcp/alpha", headers=mcp_headers, timeout=10) as stream:
            assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
            assert b"data:" not in b"".join(stream.iter_raw())
        assert 1.0 <= time.monotonic() - started < 9
        follow = httpx.get(f"{base}/v1/projects/alpha/events?after_id=0", timeout=10)  # slots were released
        assert follow.status_code == 200 and len(follow.json()["events"]) == 1


def test_failed_authentication_is_rate_limited_per_address(data_dir: Path) -> None:
    with live_server(data_dir, keys=KEYS, auth_failures_per_minute=3) as base:
        statuses = [httpx.get(f"{base}/v1/projects", headers=bearer(WRONG_KEY)).status_code for _ in range(3)]
        assert statuses == [401, 401, 401]
        for headers in (bearer(WRONG_KEY), bearer(KEY_ALPHA), {}):  # limited: even a right key is not looked at
            limited = httpx.get(f"{base}/v1/projects", headers=headers)
            assert limited.status_code == 429 and limited.json()["error"]["code"] == "rate_limited"
            assert 1 <= int(limited.headers["retry-after"]) <= 20
            assert KEY_ALPHA not in limited.text and WRONG_KEY not in limited.text
        assert httpx.get(f"{base}/v1/health").status_code == 200  # public paths need no key


def test_failure_limiter_refills_at_its_rate_and_forgets_the_oldest_address() -> None:
    now = [1000.0]
    limiter = FailureLimiter(6, clock=lambda: now[0], max_addresses=2)  # one failure back every 10 s
    for _ in range(6):
        assert limiter.retry_after("10.0.0.1") == 0
        limiter.record_failure("10.0.0.1")
    assert limiter.retry_after("10.0.0.1") == 10
    now[0] += 4
    assert limiter.retry_after("10.0.0.1") == 6
    now[0] += 6
    assert limiter.retry_after("10.0.0.1") == 0
    limiter.record_failure("10.0.0.1")
    assert limiter.retry_after("10.0.0.1") == 10
    assert limiter.retry_after("10.0.0.2") == 0  # another address has its own allowance
    limiter.record_failure("10.0.0.2")
    limiter.record_failure("10.0.0.3")  # the table holds two: the oldest address is forgotten
    assert limiter.retry_after("10.0.0.1") == 0


def test_an_mcp_get_resuming_with_last_event_id_gets_a_stream_that_ends(data_dir: Path) -> None:
    with live_server(data_dir, stream_idle_seconds=0.5) as base:
        headers = {"Accept": "text/event-stream", "Last-Event-ID": "5"}
        with httpx.stream("GET", f"{base}/mcp/alpha", headers=headers, timeout=10) as stream:
            assert stream.status_code == 200
            assert b"data:" not in b"".join(stream.iter_raw())


class Recorder:
    """The ASGI server's side of one request: what the app sent."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def status_and_headers(self) -> tuple[int, dict[bytes, bytes]]:
        return self.sent[0]["status"], dict(self.sent[0]["headers"])


SCOPE = {"type": "http", "method": "GET", "path": "/x", "headers": []}


def test_close_on_server_error_marks_every_5xx_and_answers_apps_that_did_not() -> None:
    async def unavailable(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 503, "headers": [(b"connection", b"keep-alive")]})
        await send({"type": "http.response.body", "body": b"{}"})

    async def silent(scope: Any, receive: Any, send: Any) -> None:
        return None

    async def fails_before(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("broken")

    async def fails_after_answering(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 500, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})
        raise RuntimeError("re-raised after the handler answered")

    async def fails_mid_stream(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        raise RuntimeError("stream broke")

    for app, status in ((unavailable, 503), (silent, 500), (fails_before, 500), (fails_after_answering, 500)):
        recorder = Recorder()
        anyio.run(CloseOnServerError(app), SCOPE, recorder.receive, recorder.send)
        got, headers = recorder.status_and_headers()
        assert got == status and headers[b"connection"] == b"close", app.__name__
        assert list(headers).count(b"connection") == 1
    recorder = Recorder()
    with pytest.raises(RuntimeError):  # the server must abort the connection: the stream is broken
        anyio.run(CloseOnServerError(fails_mid_stream), SCOPE, recorder.receive, recorder.send)


def test_close_on_server_error_never_logs_a_secret_from_the_path(caplog: pytest.LogCaptureFixture) -> None:
    token = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
    scope = {**SCOPE, "path": f"/v1/projects/alpha/sessions/{token}/memory"}

    async def silent(scope: Any, receive: Any, send: Any) -> None:
        return None

    async def fails_before(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("broken")

    caplog.set_level(logging.DEBUG, logger="obsmem.http")
    for app in (silent, fails_before):
        caplog.clear()
        recorder = Recorder()
        anyio.run(CloseOnServerError(app), scope, recorder.receive, recorder.send)
        assert recorder.status_and_headers()[0] == 500
        assert token not in caplog.text, app.__name__
        assert "/v1/projects/alpha/sessions/[REDACTED:github_token]/memory" in caplog.text, app.__name__


def test_a_configured_key_is_cut_from_the_error_log_however_it_is_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A base64 key holds '/' and '+' (which split a path and decode to a space), and needs no credential
    shape to be one: the error log's path, as the access log's target, cuts it whole."""
    key = "Zm9vYmFy/+c2VjcmV0a2V5MTIzNDU2Nzg5MA=="
    settings = settings_for(tmp_path)
    settings.api_keys = [ApiKey(key=key, name="ops")]
    with Obsmem(settings) as service:
        app = create_app(service)

        async def fails_before(scope: Any, receive: Any, send: Any) -> None:
            raise RuntimeError("broken")

        caplog.set_level(logging.DEBUG, logger="obsmem.http")
        for path in (f"/v1/projects/alpha/sessions/{key}/memory", f"/v1/health/{quote(key, safe='')}"):
            recorder = Recorder()
            scope = {**SCOPE, "path": path, "app": app}
            anyio.run(CloseOnServerError(fails_before), scope, recorder.receive, recorder.send)
        assert key not in caplog.text and quote(key, safe="") not in caplog.text and "c2VjcmV0" not in caplog.text
        assert caplog.text.count("[REDACTED:api_key]") == 2
    assert loggable_target(f"/v1/search?q={key}&x={quote_plus(key)}", [key]) == (
        "/v1/search?q=[REDACTED:api_key]&x=[REDACTED:api_key]"
    )


def test_the_connection_deadlines_and_invalid_http_hold_over_the_h11_protocol_too(tmp_path: Path) -> None:
    # uvicorn picks httptools when it is installed (as here); the deadlines must not depend on it.
    port = free_port()
    settings = settings_for(tmp_path, keep_alive_seconds=0.5, header_timeout_seconds=0.5)
    with Obsmem(settings) as service:
        config = uvicorn.Config(
            create_app(service),
            host="127.0.0.1",
            port=port,
            http=protocol_class(0.5, H11Protocol),
            timeout_keep_alive=0.5,  # type: ignore[arg-type]
            lifespan="off",
            log_level="warning",
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + 20
            while not server.started:
                assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
                time.sleep(0.05)
            base = f"http://127.0.0.1:{port}"
            with connection(base) as silent:
                assert closed_cleanly(silent)
            with connection(base) as slow:
                slow.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127")
                status, headers, _ = read_response(slow)
                assert status == 408 and headers["connection"] == "close" and closed_cleanly(slow)
            assert httpx.get(f"{base}/v1/health").status_code == 200
            assert_invalid_http_answers(base)
        finally:
            server.should_exit = True
            thread.join(timeout=20)
