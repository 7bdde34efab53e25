"""The server as it runs: a real uvicorn process on 127.0.0.1, raw sockets, the official MCP client."""

from __future__ import annotations

import functools
import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from obsmem.app import Obsmem
from obsmem.errors import ConfigurationError
from obsmem.surfaces.http.server import check_bind, is_loopback_host
from support.http_server import (
    ALPHA_NOTES,
    KEY_ALL,
    KEY_ALPHA,
    KEYS,
    bearer,
    live_server,
    seed,
    settings_for,
    storage_toml,
    tree,
)

Serve = Callable[..., AbstractContextManager[str]]


@pytest.fixture
def data_dir(tmp_path: Path, backend_storage: dict[str, Any]) -> Path:
    """The seeded project ``alpha``, on the backend under test (each test using it runs on both)."""
    with Obsmem(settings_for(tmp_path, storage=backend_storage.get("storage"))) as service:
        seed(service, "alpha", ALPHA_NOTES)
    return tmp_path / "data"


@pytest.fixture
def serve(data_dir: Path, backend_storage: dict[str, Any]) -> Serve:
    """``live_server`` over ``data_dir`` with the settings of the backend under test."""
    return functools.partial(live_server, data_dir, extra=storage_toml(backend_storage.get("storage", {})))


def raw_request(base: str, request: bytes) -> bytes:
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "example.com"])
def test_serve_refuses_a_non_loopback_bind_without_keys(tmp_path: Path, host: str) -> None:
    command = [sys.executable, "-m", "obsmem.surfaces.http", "--data-dir", str(tmp_path), "--host", host]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert finished.returncode == 2
    assert "configuration_error" in finished.stderr and "without API keys" in finished.stderr


def test_bind_rules() -> None:
    assert all(is_loopback_host(h) for h in ("127.0.0.1", "127.8.9.1", "::1", "[::1]", "localhost"))
    assert not any(is_loopback_host(h) for h in ("0.0.0.0", "::", "10.0.0.1", "example.com", ""))
    open_settings = settings_for(Path("/nonexistent"), host="0.0.0.0")
    with pytest.raises(ConfigurationError):
        check_bind(open_settings)
    check_bind(settings_for(Path("/nonexistent"), keys=KEYS, host="0.0.0.0"))  # keys: any interface
    check_bind(settings_for(Path("/nonexistent"), host="127.0.0.1"))


def test_without_keys_the_server_says_it_is_loopback_only(tmp_path: Path) -> None:
    # serve() on an ephemeral loopback port, stopped by SIGINT after a moment; its log is read whole. About the
    # bind alone, so on the default backend only.
    command = [sys.executable, "-c", _SERVE_BRIEFLY, str(tmp_path / "data")]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert "no API keys configured" in finished.stderr and "loopback only" in finished.stderr


_SERVE_BRIEFLY = """
import os, signal, sys, threading
from obsmem.settings import load_settings
from obsmem.surfaces.http import serve
settings = load_settings(data_dir=sys.argv[1])
settings = settings.model_copy(update={"server": settings.server.model_copy(update={"port": 0})})
threading.Timer(2.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
serve(settings)
"""


def test_dot_segments_and_encoded_paths_on_the_wire(data_dir: Path, serve: Serve) -> None:
    before = tree(data_dir)
    with serve(keys=KEYS) as base:
        for target in (
            "/v1/projects/../status",
            "/v1/projects/./status",
            "/v1/projects/%2e%2e/status",
            "/v1/projects/..%2f..%2fetc/status",
            "/v1/projects/alpha/../../../etc/status",
            "/v1/projects/%00/status",
            "//v1/projects/alpha/status",
        ):
            request = f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY_ALL}\r\n"
            response = raw_request(base, (request + "Connection: close\r\n\r\n").encode())
            assert status_of(response) in (400, 404, 422), (target, response[:200])
            assert b"Beta" not in response and b"MapTool" not in response
        body = json.dumps({"events": [{"role": "user", "content": "x"}]})
        for target in ("/v1/projects/../sessions/s1/events", "/v1/projects/%2e%2e/sessions/s1/events"):
            request = (
                f"POST {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY_ALL}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}"
            )
            assert status_of(raw_request(base, request.encode())) in (400, 404, 422)
        listed = httpx.get(f"{base}/v1/projects", headers=bearer(KEY_ALL), timeout=10).json()
    assert listed == {"projects": ["alpha"]}  # on PostgreSQL the projects live in the database, not data_dir
    assert tree(data_dir) == before


def test_chunked_body_over_the_limit_is_413(serve: Serve) -> None:
    with serve(max_body_bytes=4096) as base:
        head = (
            b"POST /v1/projects/alpha/sessions/s1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        chunk = b'{"events": [' + b'{"role": "user", "content": "' + b"z" * 1000 + b'"},' * 1
        piece = b"%x\r\n%s\r\n" % (len(chunk), chunk)
        filler = b"z" * 1024
        pieces = [piece] + [b"%x\r\n%s\r\n" % (len(filler), filler)] * 8 + [b"0\r\n\r\n"]
        response = raw_request(base, head + b"".join(pieces))
        assert status_of(response) == 413
        assert b'"payload_too_large"' in response
        declared = httpx.post(f"{base}/v1/projects/alpha/search", content=b"x" * 5000)
        assert declared.status_code == 413
        assert httpx.get(f"{base}/v1/projects/alpha/status").json()["events"] == len(ALPHA_NOTES)


def test_a_body_over_the_limit_still_being_sent_gets_413_not_a_reset_connection(serve: Serve) -> None:
    # The guard answered at once and closed the connection with the rest of the body unread: the kernel reset
    # it, which threw away the 413 before an async httpx client (which sends its whole body before it reads)
    # read it, so the client saw ReadError, a transient failure to retry forever. Declared and chunked alike.
    body = json.dumps({"events": [{"role": "user", "content": "x" * 9_000_000}]}).encode()
    url = "/v1/projects/alpha/sessions/s1/events"

    def chunked() -> Any:
        async def pieces() -> Any:
            for start in range(0, len(body), 65536):
                yield body[start : start + 65536]

        return pieces()

    async def scenario(base: str) -> list[tuple[int, str, int]]:
        answers = []
        async with httpx.AsyncClient(base_url=base, timeout=30.0) as client:
            for content in (body, chunked(), body, chunked()):
                answer = await client.post(url, content=content, headers={"Content-Type": "application/json"})
                error = answer.json()["error"]
                answers.append((answer.status_code, error["code"], error["max_body_bytes"]))
        return answers

    with serve(max_body_bytes=64 * 1024) as base:
        # The answer names the limit, so a client cutting its events can fit them to it at once.
        assert anyio.run(scenario, base) == [(413, "payload_too_large", 64 * 1024)] * 4
        assert httpx.get(f"{base}/v1/projects/alpha/status").json()["events"] == len(ALPHA_NOTES)


def test_a_body_over_the_limit_announced_with_expect_100_continue_is_refused_unsent(serve: Serve) -> None:
    # A client sending "Expect: 100-continue" (curl does above 1 MB) waits for the go-ahead before its body: the
    # guard's read of a refused body to throw it away made the server send "100 Continue", so the client sent
    # all of it (up to 64 MiB) for nothing, and one that sent none waited until the body deadline for its 413.
    request = (
        "POST /v1/projects/alpha/sessions/s1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/json\r\nContent-Length: 1000000\r\nExpect: 100-continue\r\n\r\n"
    )
    with serve(max_body_bytes=64 * 1024) as base:
        started = time.monotonic()
        response = raw_request(base, request.encode())
        assert status_of(response) == 413 and b"100 Continue" not in response
        assert time.monotonic() - started < 5


def test_concurrent_searches_all_succeed(serve: Serve) -> None:
    with serve(keys=KEYS) as base, httpx.Client(base_url=base, headers=bearer(KEY_ALPHA)) as client:

        def one(index: int) -> int:
            query = ["MapToolArguments", "gpt-4", "a", "%", "#2510"][index % 5]
            return client.post("/v1/projects/alpha/search", json={"query": query}).status_code

        with ThreadPoolExecutor(16) as pool:
            assert set(pool.map(one, range(200))) == {200}


def test_mcp_over_streamable_http_with_keys(serve: Serve) -> None:
    with serve(keys=KEYS) as base:

        async def scenario() -> None:
            with anyio.fail_after(60):
                headers = bearer(KEY_ALPHA)
                async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
                    transport = streamable_http_client(f"{base}/mcp/alpha?session_id=s1", http_client=http)
                    async with Client(transport) as client:
                        names = [tool.name for tool in (await client.list_tools()).tools]
                        assert names == ["memory_search", "recall", "memory"]
                        found = await client.call_tool("memory_search", {"query": "gpt-4"})
                        hits = json.loads(found.content[0].text)["hits"]
                        assert [hit["content"] for hit in hits] == [ALPHA_NOTES[1][2]]
                        recalled = await client.call_tool("recall", {"id": hits[0]["id"]})
                        assert json.loads(recalled.content[0].text)["memory"]["memory_id"] == hits[0]["memory_id"]
                        missing = await client.call_tool("recall", {"id": "ffffffffffff"})
                        assert missing.is_error and "session 's1'" in missing.content[0].text

        anyio.run(scenario)
        listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        assert httpx.post(f"{base}/mcp/alpha", json=listing).status_code == 401
        refused = httpx.post(f"{base}/mcp/beta", json=listing, headers=bearer(KEY_ALPHA))
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "project_not_found"
        bad_session = httpx.post(f"{base}/mcp/alpha?session_id=a%20b", json=listing, headers=bearer(KEY_ALPHA))
        assert bad_session.status_code == 422


def test_the_access_log_never_prints_a_secret_from_the_request_target(data_dir: Path, serve: Serve) -> None:
    secrets_sent = ("ghp_16C7e42F292c6912E7710c838347Ae178B4a", "AKIAIOSFODNN7EXAMPLE", "Zr81kq4wLm")
    with serve(keys=KEYS) as base:
        headers = bearer(KEY_ALL)
        targets = [
            f"/v1/projects/alpha/sessions/{secrets_sent[0]}/memory",
            f"/v1/projects/alpha/memories/000000000000?session_id={secrets_sent[1]}",
            "/v1/projects/alpha/sessions/AKIA%E2%80%8BIOSFODNN7EXAMPLE/status",  # split by a zero-width space
            "/v1/projects/alpha/sessions/s1/memory?note=DB_PASS%3DZr81kq4wLm",
            "/v1/projects/alpha/sessions/s1/memory",
        ]
        statuses = [httpx.get(base + target, headers=headers, timeout=10).status_code for target in targets]
    assert statuses == [422, 422, 422, 200, 200]  # an unknown query parameter is ignored, but logged
    log = "\n".join(path.read_text(encoding="utf-8") for path in data_dir.parent.glob("server-*.log"))
    for secret in secrets_sent:
        assert secret not in log
    assert "IOSFODNN7EXAMPLE" not in log
    assert "GET /v1/projects/alpha/sessions/[REDACTED:github_token]/memory HTTP/1.1" in log
    assert "session_id=[REDACTED:aws_access_key]" in log and "note=[REDACTED:secret]" in log
    assert "GET /v1/projects/alpha/sessions/s1/memory HTTP/1.1" in log  # ordinary targets are kept as sent


def test_the_access_log_never_prints_a_configured_key_sent_in_the_wrong_place(data_dir: Path, serve: Serve) -> None:
    """A key need not look like a credential (``openssl rand -hex 32`` does not): a client that puts its own
    key into the path or the query must not find it in the server's log."""
    with serve(keys=KEYS) as base:
        headers = bearer(KEY_ALL)
        targets = [
            f"/v1/health?q={KEY_ALPHA}",
            f"/v1/projects/alpha/events?session_id={KEY_ALPHA}&x=1",
            f"/v1/projects/alpha/sessions/{KEY_ALPHA}/status",
        ]
        for target in targets:
            httpx.get(base + target, headers=headers, timeout=10)
    log = "\n".join(path.read_text(encoding="utf-8") for path in data_dir.parent.glob("server-*.log"))
    assert KEY_ALPHA not in log and KEY_ALL not in log
    assert "GET /v1/health?q=[REDACTED:api_key] HTTP/1.1" in log
    assert "events?session_id=[REDACTED:api_key]&x=1 HTTP/1.1" in log
    assert "GET /v1/projects/alpha/sessions/[REDACTED:api_key]/status HTTP/1.1" in log


def test_the_access_log_hides_a_query_value_whose_name_says_secret(data_dir: Path, serve: Serve) -> None:
    # Neither "api_key" nor "abcdef123456" looks like a credential alone; together they are one.
    sent = ("abcdef123456", "s3cr3tvalue99", "hunter2hunter2")
    with serve(keys=KEYS) as base:
        headers = bearer(KEY_ALL)
        targets = [
            f"/v1/health?api_key={sent[0]}",
            f"/v1/projects/alpha/status?token={sent[1]}&password={sent[2]}&limit=5",
        ]
        statuses = [httpx.get(base + target, headers=headers, timeout=10).status_code for target in targets]
    assert statuses == [200, 200]
    log = "\n".join(path.read_text(encoding="utf-8") for path in data_dir.parent.glob("server-*.log"))
    for secret in sent:
        assert secret not in log
    assert "GET /v1/health?api_key=[REDACTED:secret] HTTP/1.1" in log
    assert "status?token=[REDACTED:secret]&password=[REDACTED:secret]&limit=5 HTTP/1.1" in log
