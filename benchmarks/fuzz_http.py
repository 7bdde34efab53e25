"""Fuzz the HTTP API: hostile bodies, paths, query strings and headers on every route; count the 5xx.

    python benchmarks/fuzz_http.py                          # 20,000 requests, 4 clients, seed 1
    python benchmarks/fuzz_http.py --requests 50000 --seed 7 --keep /tmp/fuzz

Starts ``obsmem serve`` on 127.0.0.1 (temporary data directory, API keys), seeds a project, reads the
published OpenAPI document and adds the MCP endpoint, so every route is covered (each operation is
picked with equal weight). Each request takes a route and mutates it:

- path parameters: valid values, or ``..``, encoded slashes and dots, NUL, over-long, Unicode, spaces;
- query parameters: integers at and past 64 bits, negative, floats, booleans and strings where integers
  belong, repeated keys, NUL and control characters, over-long values;
- bodies: the route's own shape with fields swapped for huge or negative integers, floats, booleans,
  strings, nulls, deep nesting, long strings, lone surrogates, NUL; or not JSON at all (invalid UTF-8,
  truncated JSON, top-level arrays, numbers, ``NaN``), chunked or empty;
- headers: missing, wrong, malformed and right API keys, content types, ``Accept: text/event-stream``,
  ``Last-Event-ID``, ``Origin``, odd ``Content-Encoding``;
- about one request in twenty is raw bytes on a socket: malformed request lines and headers, conflicting
  ``Content-Length`` and ``Transfer-Encoding``, HTTP/1.0, absurd methods, over-long headers.

Prints one JSON document: requests sent, statuses, the 5xx (each with route and mutation, never the
bytes sent), connection errors. Exit status 0 when no response was a 5xx.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

KEY = "fuzz-admin-key-0123456789abcdef"
PROJECT = "fuzz"
SETTINGS = {
    "auth_failures_per_minute": 100_000,  # bad keys are part of the fuzz; the limit has its own probe
    "stream_idle_seconds": 0.2,
    "max_stream_followers": 16,
    "body_timeout_seconds": 5.0,
}
HUGE_INTS: list[Any] = [2**63 - 1, 2**63, 2**64, -(2**63), -(2**63) - 1, 10**30, -1, 0, 2**53 + 1]
ODD_SCALARS: list[Any] = [True, False, None, 1.5, -0.0, 1e308, "1", "", "true", "0x10", " 7 ", "\u0000", "\ud800"]
HOSTILE_SEGMENTS = [
    "..", ".", "%2e%2e", "%2E%2e%2f", "a%2Fb", "%00", "%ff%fe", "x" * 300, "ünïcødé", "a b", "a%20b", "-", "_",
    "CON", "{project}", "%7Bproject%7D", "😀", "a\tb", "0" * 64, "f" * 11, "F" * 12, "%", "%%", "..%2f..%2fetc",
    "1e400", "-1", "9" * 40, "null",
]  # fmt: skip
DEEP = "[" * 5000 + "]" * 5000


@dataclass(frozen=True)
class Operation:
    method: str
    template: str
    query: tuple[str, ...]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def server(work: Path) -> Iterator[str]:
    settings = work / "obsmem.toml"
    lines = ["[server]"] + [f"{name} = {value!r}" for name, value in SETTINGS.items()]
    lines += ["", "[[api_keys]]", 'name = "fuzz"', f'key = "{KEY}"', 'projects = ["*"]']
    settings.write_text("\n".join(lines) + "\n", encoding="utf-8")
    port = free_port()
    command = [sys.executable, "-m", "obsmem.surfaces.cli", "--config", str(settings), "--data-dir", str(work / "data")]
    command += ["serve", "--port", str(port)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OBSMEM_")}
    with (work / "server.log").open("wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("obsmem serve did not start")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/v1/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def seed_project(base: str) -> list[str]:
    """A project with events and observations; returns the display ids."""
    auth = {"Authorization": f"Bearer {KEY}"}
    events = [{"role": "user", "content": f"event {n} about MapToolArguments and gpt-4"} for n in range(20)]
    httpx.post(f"{base}/v1/projects/{PROJECT}/sessions/s1/events", json={"events": events}, headers=auth)
    notes = [
        {"session_id": "s1", "content": f"note {n}: fixed MapToolArguments in src/a.py:{n}",
         "timestamp": f"2026-01-{n + 1:02d} 10:00", "source_refs": [n + 1]}
        for n in range(20)
    ]  # fmt: skip
    receipt = httpx.post(f"{base}/v1/projects/{PROJECT}/observations", json={"observations": notes}, headers=auth)
    return [entry["id"] for entry in receipt.json()["added"]]


def operations(base: str) -> list[Operation]:
    schema = httpx.get(f"{base}/openapi.json").json()
    found = []
    for template, methods in schema["paths"].items():
        for method, spec in methods.items():
            query = tuple(p["name"] for p in spec.get("parameters", []) if p.get("in") == "query")
            found.append(Operation(method.upper(), template, query))
    for method in ("POST", "GET", "DELETE"):
        found.append(Operation(method, "/mcp/{project}", ("session_id",)))
    return found


# -- mutations ------------------------------------------------------------------------------------------


def scalar(rng: random.Random) -> Any:
    pick = rng.random()
    if pick < 0.45:
        return rng.choice(HUGE_INTS)
    if pick < 0.8:
        return rng.choice(ODD_SCALARS)
    return rng.choice([[], {}, [1, "x"], {"a": 1}, "x" * rng.choice([1000, 5000, 70_000])])


def valid_body(op: Operation, rng: random.Random) -> dict[str, Any]:
    if op.template.endswith("/events") and op.method == "POST":
        return {"events": [{"role": "user", "content": "hello", "seq": rng.randint(1, 30)}]}
    if op.template.endswith("/observations"):
        ref: Any = rng.choice([1, {"session_id": "s1", "seq": 2}])
        item = {"session_id": "s1", "content": "c", "timestamp": "2026-01-01 10:00", "source_refs": [ref]}
        return {"observations": [item]}
    if op.template.endswith("/search"):
        return {"query": rng.choice(["MapToolArguments", "a", "%", "gpt-4"]), "limit": 5}
    if op.template.endswith("/models"):
        return {"observer": {"model_id": "m-1", "context_window_tokens": 4096}}
    if op.template.startswith("/mcp"):
        method = rng.choice(["tools/list", "tools/call", "initialize", "ping", "nope"])
        params = (
            {"name": "memory_search", "arguments": {"query": "gpt-4", "limit": 3}} if method == "tools/call" else {}
        )
        return {"jsonrpc": "2.0", "id": rng.randint(0, 10), "method": method, "params": params}
    return {}


def mutate(value: Any, rng: random.Random, depth: int = 0) -> Any:
    """Replace one leaf (or a whole container) somewhere in ``value`` with something hostile."""
    if depth > 4 or rng.random() < 0.25:
        return scalar(rng)
    if isinstance(value, dict) and value:
        key = rng.choice(list(value))
        copy = dict(value)
        if rng.random() < 0.15:
            copy[rng.choice(["extra", "\u0000", "ü" * 50, "__proto__"])] = scalar(rng)
        else:
            copy[key] = mutate(value[key], rng, depth + 1)
        return copy
    if isinstance(value, list) and value:
        copy = list(value)
        index = rng.randrange(len(copy))
        copy[index] = mutate(copy[index], rng, depth + 1)
        if rng.random() < 0.1:
            copy = copy * rng.choice([2, 50])
        return copy
    return scalar(rng)


def encode_body(op: Operation, rng: random.Random) -> tuple[bytes | None, str]:
    pick = rng.random()
    if pick < 0.65:
        body = mutate(valid_body(op, rng), rng)
        try:
            return json.dumps(body).encode("utf-8", "surrogatepass"), "mutated JSON"
        except (ValueError, TypeError):
            return None, "none"
    raw: list[tuple[bytes, str]] = [
        (b"", "empty body"),
        (b"\xff\xfe{\x00}", "invalid UTF-8"),
        (b'{"events": [', "truncated JSON"),
        (b"[1, 2, 3]", "top-level array"),
        (b"12345678901234567890123456789", "top-level huge number"),
        (b'{"query": NaN, "limit": Infinity}', "NaN and Infinity"),
        (DEEP.encode(), "deep nesting"),
        (b'{"query": "\\ud800"}', "lone surrogate escape"),
        (b'{"a":' * 3000 + b"1" + b"}" * 3000, "deep objects"),
        (json.dumps(valid_body(op, rng)).encode(), "valid body"),
        (b"null", "null"),
        (b'{"events": [{"role": "user", "seq": 1e400}]}', "float overflow"),
    ]
    return rng.choice(raw)


def path_for(op: Operation, rng: random.Random, ids: list[str]) -> tuple[str, str]:
    hostile = False
    path = op.template
    for name, good in (("{project}", PROJECT), ("{session_id}", "s1"), ("{id}", rng.choice(ids) if ids else "0" * 12)):
        if name in path:
            if rng.random() < 0.3:
                hostile = True
                segment = rng.choice(HOSTILE_SEGMENTS)  # sent percent-encoded where a URL cannot hold it raw
                path = path.replace(name, quote(segment.encode("utf-8", "surrogatepass"), safe="%"))
            else:
                path = path.replace(name, rng.choice([good, good, "other", "s2"]))
    return path, "hostile path" if hostile else "path"


def query_for(op: Operation, rng: random.Random) -> str:
    """A query string (percent-encoded by hand: values may hold lone surrogates and control characters)."""
    names = list(op.query) or ["x"]
    params = []
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        value = scalar(rng)
        text = (json.dumps(value) if not isinstance(value, str) else value)[:3000]
        name = rng.choice(names + ["after_id", "limit", "format", "type"])
        params.append(f"{name}={quote(text.encode('utf-8', 'surrogatepass'), safe='')}")
    return "?" + "&".join(params) if params else ""


def headers_for(rng: random.Random) -> tuple[dict[str, bytes], str]:
    headers: dict[str, str] = {}
    auth = rng.random()
    if auth < 0.7:
        headers["Authorization"] = f"Bearer {KEY}"
    elif auth < 0.8:
        headers["Authorization"] = rng.choice(["Bearer", "Bearer  x", "Basic YWxhZGRpbjpvcGVu", "bearer x" * 100])
    elif auth < 0.9:
        headers["Authorization"] = f"Bearer {KEY[:-1]}"
    headers["Content-Type"] = rng.choice(
        ["application/json"] * 6 + ["text/plain", "application/json; charset=latin-1", "multipart/form-data", ""]
    )
    if rng.random() < 0.1:
        headers["Accept"] = rng.choice(["text/event-stream", "text/event-stream, application/json", "*/*", "x/y"])
    if rng.random() < 0.05:
        headers["Last-Event-ID"] = rng.choice(["-1", "99999999999999999999", "abc", "5", "\u00ff"])
    if rng.random() < 0.05:
        headers["Origin"] = rng.choice(["http://evil.example", "null", "http://127.0.0.1:1"])
    if rng.random() < 0.03:
        headers["Content-Encoding"] = rng.choice(["gzip", "br", "identity"])
    kind = "auth" if "Authorization" in headers else "no auth"
    return {name: value.encode("latin-1") for name, value in headers.items()}, kind


RAW_REQUESTS = [
    (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello", "duplicate Content-Length"),
    (b"POST /v1/projects/fuzz/search HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
     b"Content-Length: 3\r\n\r\n0\r\n\r\n", "TE and CL"),
    (b"GET /v1/health HTTP/1.0\r\n\r\n", "HTTP/1.0"),
    (b"FOO /v1/health HTTP/1.1\r\nHost: x\r\n\r\n", "unknown method"),
    (b"GET /v1/health HTTP/9.9\r\nHost: x\r\n\r\n", "HTTP/9.9"),
    (b"GET /v1/health\r\n\r\n", "no version"),
    (b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", "70 KB header"),
    (b"GET /v1/health HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n", "space in header name"),
    (b"GET /v1/projects/fuzz/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe\r\n\r\n", "binary key"),
    (b"GET /v1/projects/fuzz/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \r\n\r\n", "empty bearer"),
    (b"POST /v1/projects/fuzz/search HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", "negative length"),
    (b"POST /v1/projects/fuzz/search HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n",
     "huge length"),
    (b"POST /v1/projects/fuzz/search HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
     "bad chunk size"),
    (b"GET /v1/projects/fuzz/status?" + b"a=1&" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", "20 KB query"),
    (b"GET http://evil/v1/health HTTP/1.1\r\nHost: x\r\n\r\n", "absolute URI"),
    (b"GET /v1/health HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", "websocket upgrade"),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", "TLS hello"),
]  # fmt: skip


def raw_exchange(port: int, request: bytes) -> int | None:
    """The status line's code, or None when the server closed without one (allowed for garbage)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        with contextlib.suppress(OSError):
            sock.sendall(request)
        data = b""
        with contextlib.suppress(OSError):
            while b"\r\n" not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
    if not data.startswith(b"HTTP/"):
        return None
    return int(data.split(b" ", 2)[1])


# -- the run --------------------------------------------------------------------------------------------


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.statuses: Counter[str] = Counter()
        self.routes: Counter[str] = Counter()
        self.server_errors: list[dict[str, Any]] = []
        self.connection_errors: Counter[str] = Counter()

    def record(self, route: str, status: int | None, mutation: str, code: str = "-") -> None:
        with self.lock:
            self.routes[route] += 1
            self.statuses[str(status) if status is not None else "closed"] += 1
            if status is not None and status >= 500:
                self.server_errors.append({"route": route, "status": status, "code": code, "mutation": mutation})


def error_code(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return "-"


def client_loop(base: str, ops: list[Operation], ids: list[str], count: int, seed: int, tally: Tally) -> None:
    rng = random.Random(seed)
    port = int(base.rsplit(":", 1)[1])
    with httpx.Client(base_url=base, timeout=httpx.Timeout(30.0)) as client:
        for _ in range(count):
            if rng.random() < 0.05:
                request, label = rng.choice(RAW_REQUESTS)
                tally.record("raw socket", raw_exchange(port, request), label)
                continue
            op = rng.choice(ops)
            route = f"{op.method} {op.template}"
            path, path_kind = path_for(op, rng, ids)
            headers, auth_kind = headers_for(rng)
            body, body_kind = (
                (None, "none") if op.method in ("GET", "DELETE") and rng.random() < 0.8 else encode_body(op, rng)
            )
            content: Any = body
            if body is not None and rng.random() < 0.1:
                content = iter([body[: len(body) // 2], body[len(body) // 2 :]])  # chunked
            mutation = f"{path_kind}; {auth_kind}; body: {body_kind}"
            try:
                with client.stream(op.method, path + query_for(op, rng), headers=headers, content=content) as response:
                    response.read()
                tally.record(route, response.status_code, mutation, error_code(response))
            except httpx.HTTPError as exc:
                with tally.lock:
                    tally.connection_errors[f"{route}: {type(exc).__name__}"] += 1
                tally.record(route, None, mutation)


def run(work: Path, requests: int, clients: int, seed: int) -> dict[str, Any]:
    with server(work) as base:
        ids = seed_project(base)
        ops = operations(base)
        tally = Tally()
        started = time.monotonic()
        per_client = requests // clients
        threads = [
            threading.Thread(target=client_loop, args=(base, ops, ids, per_client, seed * 1000 + n, tally))
            for n in range(clients)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        healthy = httpx.get(f"{base}/v1/health", timeout=10).status_code == 200
    server_errors = tally.server_errors
    by_route = Counter(f"{e['route']} -> {e['status']} {e['code']}" for e in server_errors)
    return {
        "requests": sum(tally.statuses.values()),
        "seed": seed,
        "clients": clients,
        "seconds": round(elapsed, 1),
        "operations": len(ops),
        "statuses": dict(sorted(tally.statuses.items())),
        "server_errors": len(server_errors),
        "server_errors_by_route": dict(by_route.most_common()),
        "server_error_samples": server_errors[:20],
        "connection_errors": dict(tally.connection_errors.most_common()),
        "requests_per_route": dict(sorted(tally.routes.items())),
        "healthy_after": healthy,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", help="a new directory to keep the data directory and server log in")
    args = parser.parse_args()
    if args.keep:
        work = Path(args.keep)
        work.mkdir(parents=True, exist_ok=False)
        report = run(work, args.requests, args.clients, args.seed)
    else:
        with tempfile.TemporaryDirectory(prefix="obsmem-fuzz-") as tmp:
            report = run(Path(tmp), args.requests, args.clients, args.seed)
    print(json.dumps(report, indent=1))
    return 0 if report["server_errors"] == 0 and report["healthy_after"] else 1


if __name__ == "__main__":
    sys.exit(main())
