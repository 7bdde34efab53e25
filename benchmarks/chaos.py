"""Chaos and fault probes against ``obsmem serve``: what a hostile client or an unlucky operator does.

    python benchmarks/chaos.py                  # prints a JSON report, then a table
    python benchmarks/chaos.py --keep DIR       # keep the data directories and server logs in DIR

Starts ``obsmem serve`` itself on 127.0.0.1 (a temporary data directory, API keys and short limits in a
settings file), runs each probe and records what was expected and what was observed:

- numbers: integers past 64 bits in source refs and seqs, strings and booleans where integers belong;
- secrets in every field (event content, tool name, tool arguments, session id, observation content),
  looked for afterwards in the stored database text and in the server log;
- connection hygiene: bodies and request heads that stop arriving, silent connections, more connections
  than the cap, failed authentication beyond the rate limit, idle SSE and MCP streams, stream followers
  beyond the cap, and an unexpected 5xx (a project whose database lost a table) on a kept-alive connection;
- ``kill -9`` of the server in the middle of an ingest, then a restart: every acknowledged event is there
  and SQLite's integrity check passes;
- storage faults: a full file system (a small tmpfs filled to the brim) and a read-only bind mount (a
  database left open by a stopped server, and one closed cleanly), then the mount made writable again.
  These need ``mount`` (root); without it the rows are skipped with the reason.

The expected behaviour is the documented one (docs/http-api.md, docs/operations.md). Exit status 0 when
every row passed or was skipped, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import apsw
import httpx

KEY = "chaos-admin-key-0123456789abcdef"
WRONG_KEY = "chaos-wrong-key-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}
PROJECT = "chaos"
LIMITS = {
    "keep_alive_seconds": 1.0,
    "header_timeout_seconds": 1.0,
    "body_timeout_seconds": 1.0,
    "max_connections": 48,
    "max_in_flight": 32,
    "auth_failures_per_minute": 5,
    "stream_idle_seconds": 1.5,
    "max_stream_followers": 2,
}
# Secrets of each form the redaction must catch (fake values, shaped like real ones).
SECRETS = {
    "github_token": "ghp_" + "Zq8" * 12,
    "db_pass": "Wz9-kq2-Lm4-xx7",
    "prose_password": "tr0ub4dor-horse-91",
    "hex_secret": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "aws_key_id": "AKIAIOSFODNN7EXAMPLE",
    "session_token": "sk-live-" + "Q7x" * 8,
}
INVISIBLE = "\u200b"


@dataclass
class Row:
    probe: str
    expected: str
    observed: str
    result: str  # pass | FAIL | skip

    @classmethod
    def check(cls, probe: str, expected: str, observed: str, ok: bool) -> Row:
        return cls(probe, expected, observed, "pass" if ok else "FAIL")


# -- the server -----------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_settings(path: Path, **limits: Any) -> Path:
    lines = ["[server]"] + [f"{name} = {value!r}" for name, value in {**LIMITS, **limits}.items()]
    lines += ["", "[[api_keys]]", 'name = "chaos"', f'key = "{KEY}"', 'projects = ["*"]']
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


class Server:
    """``obsmem serve`` in its own process, its log in a file."""

    def __init__(self, data_dir: Path, settings: Path, log: Path, port: int | None = None) -> None:
        self.data_dir, self.settings, self.log_path = data_dir, settings, log
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> None:
        command = [sys.executable, "-m", "obsmem.surfaces.cli", "--config", str(self.settings)]
        command += ["--data-dir", str(self.data_dir), "serve", "--port", str(self.port)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("OBSMEM_")}
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"obsmem serve exited with {self.process.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.base}/v1/health", timeout=1).status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError("obsmem serve did not answer /v1/health in time")

    def kill9(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill9()

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


# -- raw sockets ----------------------------------------------------------------------------------------


def connect(server: Server, timeout: float = 10.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=timeout)


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before a response")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {n.strip().lower(): v.strip() for n, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", "0")):
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed in the middle of a body")
        body += chunk
    return int(lines[0].split(" ", 2)[1]), headers, body


def ends_cleanly(sock: socket.socket) -> str:
    try:
        return "EOF" if sock.recv(1) == b"" else "more data"
    except ConnectionResetError:
        return "reset"
    except TimeoutError:
        return "still open"


def code_of(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return "-"


def summary(response: httpx.Response) -> str:
    return f"{response.status_code} {code_of(response)}" if response.status_code >= 400 else str(response.status_code)


# -- probes: numbers ------------------------------------------------------------------------------------


def number_probes(server: Server, client: httpx.Client) -> list[Row]:
    rows = []
    events = client.post(f"/v1/projects/{PROJECT}/sessions/n1/events", json={"events": [{"role": "user"}] * 3})
    assert events.status_code == 200, events.text
    for label, ref in (("2^63", 2**63), ("2^64", 2**64), ("-2^63-1", -(2**63) - 1), ("10^30", 10**30)):
        items = [
            {"session_id": "n1", "content": f"valid item next to ref {label}", "timestamp": "2026-01-01 10:00",
             "source_refs": [1]},
            {"session_id": "n1", "content": "huge ref", "timestamp": "2026-01-01 10:01", "source_refs": [ref]},
        ]  # fmt: skip
        answer = client.post(f"/v1/projects/{PROJECT}/observations", json={"observations": items})
        body = answer.json() if answer.status_code == 200 else {}
        stored = len(body.get("added", [])) + len(body.get("duplicates", []))
        rejected = [r["index"] for r in body.get("rejected", [])]
        observed = f"{summary(answer)}; valid stored: {stored}, rejected: {rejected}"
        ok = answer.status_code == 200 and stored == 1 and rejected == [1]
        rows.append(Row.check(f"source ref {label}", "200; valid item stored, item 1 rejected", observed, ok))
    for label, seq in (("2^63", 2**63), ("2^64", 2**64), ("string '1'", "1"), ("boolean true", True), ("1.5", 1.5)):
        answer = client.post(
            f"/v1/projects/{PROJECT}/sessions/n2/events", json={"events": [{"role": "user", "seq": seq}]}
        )
        field = answer.json().get("error", {}).get("field") if answer.status_code == 422 else None
        observed = f"{summary(answer)} field={field}"
        rows.append(Row.check(f"seq {label}", "422 naming events.0.seq", observed, field == "events.0.seq"))
    for label, url, body in (
        ("search limit 2^64", f"/v1/projects/{PROJECT}/search", {"query": "x", "limit": 2**64}),
        ("search limit true", f"/v1/projects/{PROJECT}/search", {"query": "x", "limit": True}),
    ):
        answer = client.post(url, json=body)
        rows.append(Row.check(label, "422 invalid_request", summary(answer), answer.status_code == 422))
    answer = client.get(f"/v1/projects/{PROJECT}/events", params={"after_id": str(2**64)})
    rows.append(Row.check("events after_id 2^64", "422", summary(answer), answer.status_code == 422))
    return rows


# -- probes: secrets ------------------------------------------------------------------------------------


def stored_text(data_dir: Path) -> str:
    """Every text value of every project database (read-only), invisible characters removed."""
    chunks = []
    for path in sorted(data_dir.glob("projects/*/obsmem.db")):
        conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            for table in tables:
                with contextlib.suppress(apsw.Error):
                    for row in conn.execute(f'SELECT * FROM "{table}"'):
                        chunks.extend(str(v) for v in row if isinstance(v, str))
        finally:
            conn.close()
    return visible("\n".join(chunks))


def visible(text: str) -> str:
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf")


def secret_probes(server: Server, client: httpx.Client) -> list[Row]:
    s = SECRETS
    aws_split = s["aws_key_id"][:4] + INVISIBLE + s["aws_key_id"][4:]
    events = [
        {"role": "user", "content": f"deploy with DB_PASS={s['db_pass']} tonight"},
        {"role": "assistant", "type": "tool_call", "tool_name": f"run_{s['github_token']}",
         "tool_args": {"env": f"NAME_PASS={s['db_pass']}"}},
        {"role": "user", "content": f"fyi my password is {s['prose_password']}"},
        {"role": "user", "content": f"the signing secret: {s['hex_secret']}"},
        {"role": "user", "content": f"aws key id {aws_split}"},
    ]  # fmt: skip
    appended = client.post(f"/v1/projects/{PROJECT}/sessions/sec1/events", json={"events": events})
    note = {"session_id": "sec1", "content": f"user shared api key {s['hex_secret']} and DB_PASS={s['db_pass']}",
            "timestamp": "2026-01-02 09:00", "source_refs": [1]}  # fmt: skip
    written = client.post(f"/v1/projects/{PROJECT}/observations", json={"observations": [note]})
    token_session = client.post(
        f"/v1/projects/{PROJECT}/sessions/{s['session_token']}/events", json={"events": [{"role": "user"}]}
    )
    client.get(f"/v1/projects/{PROJECT}/sessions/sec1/memory")
    stored, log = stored_text(server.data_dir), visible(server.log())
    rows = [
        Row.check(
            "secrets: requests accepted",
            "events 200, observation 200",
            f"events {summary(appended)}, observation {summary(written)}",
            appended.status_code == 200 and written.status_code == 200,
        ),
        Row.check(
            "secret as a session id",
            "422 invalid_session (refused, not stored)",
            summary(token_session),
            token_session.status_code == 422 and code_of(token_session) == "invalid_session",
        ),
    ]
    for name, secret in s.items():
        where = [place for place, text in (("database", stored), ("server log", log)) if secret in text]
        observed = "found in " + " and ".join(where) if where else "absent from database and log"
        rows.append(Row.check(f"secret form {name}", "absent from database and log", observed, not where))
    return rows


# -- probes: connections --------------------------------------------------------------------------------


def slow_client_probes(server: Server) -> list[Row]:
    rows = []
    socks = [connect(server) for _ in range(20)]
    try:
        head = (
            f"POST /v1/projects/{PROJECT}/search HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
            'Content-Type: application/json\r\nContent-Length: 200\r\n\r\n{"query": '
        )
        for sock in socks:
            sock.sendall(head.encode())
        started = time.monotonic()
        answers = []
        for sock in socks:
            try:
                status, headers, body = read_response(sock)
                answers.append(
                    (status, json.loads(body)["error"]["code"], headers.get("connection"), ends_cleanly(sock))
                )
            except (OSError, ValueError) as exc:
                answers.append((0, type(exc).__name__, None, "-"))
        waited = time.monotonic() - started
    finally:
        for sock in socks:
            sock.close()
    good = all(a == (408, "request_timeout", "close", "EOF") for a in answers)
    observed = f"{sum(a[0] == 408 for a in answers)}/20 got 408 request_timeout and a clean close in {waited:.1f} s"
    rows.append(Row.check("20 slow bodies", "408 request_timeout within the 1 s body deadline", observed, good))

    with connect(server) as sock:
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0")
        try:
            status, _, body = read_response(sock)
            observed = f"{status} {json.loads(body)['error']['code']}, then {ends_cleanly(sock)}"
        except (OSError, ValueError) as exc:
            status, observed = 0, type(exc).__name__
    rows.append(Row.check("unfinished request head", "408 request_timeout, then EOF", observed, status == 408))

    socks = [connect(server) for _ in range(40)]
    try:
        started = time.monotonic()
        endings = [ends_cleanly(sock) for sock in socks]
        waited = time.monotonic() - started
    finally:
        for sock in socks:
            sock.close()
    observed = f"{endings.count('EOF')}/40 closed by the server within {waited:.1f} s"
    rows.append(Row.check("40 silent connections", "closed after keep_alive_seconds (1 s)", observed,
                          endings.count("EOF") == 40))  # fmt: skip
    return rows


def capacity_probes(server: Server) -> list[Row]:
    count = int(LIMITS["max_connections"]) + 16
    socks = [connect(server) for _ in range(count)]
    outcomes: list[str] = []
    try:
        for sock in socks:
            sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        for sock in socks:
            try:
                status, headers, body = read_response(sock)
                if status == 503:
                    close = headers.get("connection") == "close" and "retry-after" in headers
                    outcomes.append(f"503 {json.loads(body)['error']['code']}" + ("" if close else " (no close)"))
                else:
                    outcomes.append(str(status))
            except OSError as exc:
                outcomes.append(type(exc).__name__)
    finally:
        for sock in socks:
            sock.close()
    refused, served = outcomes.count("503 over_capacity"), outcomes.count("200")
    observed = f"{served} x 200, {refused} x 503 over_capacity, other: {len(outcomes) - refused - served}"
    ok = refused > 0 and served + refused == count
    rows = [
        Row.check(
            f"{count} connections (cap {LIMITS['max_connections']})",
            "200s, then 503 over_capacity + close",
            observed,
            ok,
        )
    ]
    deadline = time.monotonic() + 10
    recovered = False
    while time.monotonic() < deadline and not recovered:
        recovered = httpx.get(f"{server.base}/v1/health", timeout=5).status_code == 200
        time.sleep(0.1)
    rows.append(
        Row.check("after the connection flood", "health 200", "200" if recovered else "not recovered", recovered)
    )
    return rows


def auth_probes(server: Server) -> list[Row]:
    wrong = {"Authorization": f"Bearer {WRONG_KEY}"}
    statuses = [httpx.get(f"{server.base}/v1/projects", headers=wrong).status_code for _ in range(8)]
    limited = httpx.get(f"{server.base}/v1/projects", headers=AUTH)
    observed = (
        f"wrong keys: {statuses}; then a right key: {summary(limited)} Retry-After={limited.headers.get('retry-after')}"
    )
    ok = statuses[:5] == [401] * 5 and set(statuses[5:]) == {429} and limited.status_code == 429
    ok = ok and "retry-after" in limited.headers
    row = Row.check(
        "8 failed authentications (limit 5/min)", "5 x 401, then 429 rate_limited + Retry-After", observed, ok
    )
    return [row]


def stream_probes(server: Server, client: httpx.Client) -> list[Row]:
    rows = []
    client.put(f"/v1/projects/{PROJECT}/models", json={"observer": {"model_id": "chaos-model"}})
    sse = {**AUTH, "Accept": "text/event-stream"}
    for label, url, headers in (
        ("idle SSE stream", f"{server.base}/v1/projects/{PROJECT}/events", sse),
        (
            "idle MCP GET stream",
            f"{server.base}/mcp/{PROJECT}",
            {**sse, "Accept": "text/event-stream, application/json"},
        ),
    ):
        started = time.monotonic()
        try:
            with httpx.stream("GET", url, headers=headers, timeout=30) as stream:
                status = stream.status_code
                received = b"".join(stream.iter_raw())
            observed = f"{status}, ended cleanly after {time.monotonic() - started:.1f} s ({len(received)} bytes)"
            ok = status == 200 and time.monotonic() - started < 15
        except httpx.HTTPError as exc:
            observed, ok = f"{type(exc).__name__} after {time.monotonic() - started:.1f} s", False
        rows.append(Row.check(label, "ends cleanly after stream_idle_seconds (1.5 s)", observed, ok))
    with contextlib.ExitStack() as stack:
        opened = [
            stack.enter_context(
                httpx.stream("GET", f"{server.base}/v1/projects/{PROJECT}/events", headers=sse, timeout=30)
            )
            for _ in range(2)
        ]
        extra = httpx.get(f"{server.base}/mcp/{PROJECT}", headers=sse, timeout=10)
        retry = extra.headers.get("retry-after")
        observed = f"open: {[s.status_code for s in opened]}; third: {summary(extra)} Retry-After={retry}"
        ok = [s.status_code for s in opened] == [200, 200] and code_of(extra) == "too_many_streams"
    rows.append(Row.check("3 followers (cap 2)", "2 streams, third 503 too_many_streams", observed, ok))
    return rows


def server_error_probe(server: Server) -> list[Row]:
    with connect(server) as sock:
        head = f"GET /v1/projects/broken/status HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
        sock.sendall(f"{head}\r\n".encode())
        try:
            status, headers, body = read_response(sock)
            code, ending = json.loads(body)["error"]["code"], ends_cleanly(sock)
            observed = f"{status} {code}, Connection: {headers.get('connection')}, then {ending}"
            ok = status >= 500 and headers.get("connection") == "close" and ending == "EOF"
        except (OSError, ValueError) as exc:
            observed, ok = type(exc).__name__, False
    fresh = httpx.get(f"{server.base}/v1/projects/{PROJECT}/status", headers=AUTH)
    observed += f"; fresh connection: {summary(fresh)}"
    ok = ok and fresh.status_code == 200
    return [Row.check("5xx on a kept-alive connection", "whole 5xx + Connection: close + EOF; next OK", observed, ok)]


# -- probes: kill -9 ------------------------------------------------------------------------------------


def kill9_probe(server: Server) -> list[Row]:
    acknowledged: dict[str, int] = {}
    stop = threading.Event()

    def ingest(session: str) -> None:
        with httpx.Client(base_url=server.base, headers=AUTH, timeout=10) as client:
            while not stop.is_set():
                batch = [{"role": "user", "content": f"{session} event {i} " + "x" * 200} for i in range(50)]
                try:
                    answer = client.post(f"/v1/projects/{PROJECT}/sessions/{session}/events", json={"events": batch})
                except httpx.HTTPError:
                    return
                if answer.status_code == 200:
                    acknowledged[session] = answer.json()["last_seq"]

    threads = [threading.Thread(target=ingest, args=(f"kill-{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(3.0)
    server.kill9()
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    server.start()
    lost = []
    with httpx.Client(base_url=server.base, headers=AUTH, timeout=10) as client:
        for session, last_seq in sorted(acknowledged.items()):
            status = client.get(f"/v1/projects/{PROJECT}/sessions/{session}/status")
            if status.status_code != 200 or status.json()["last_seq"] < last_seq:
                lost.append(session)
    conn = apsw.Connection(str(server.data_dir / "projects" / PROJECT / "obsmem.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        integrity = conn.execute("PRAGMA integrity_check").fetchall()[0][0]
    finally:
        conn.close()
    total = sum(acknowledged.values())
    observed = (
        f"{total} acknowledged events in {len(acknowledged)} sessions; lost in: {lost or 'none'}; integrity {integrity}"
    )
    ok = total > 0 and not lost and integrity == "ok"
    return [Row.check("kill -9 mid-ingest, restart", "every acknowledged event kept; integrity ok", observed, ok)]


# -- probes: storage faults -----------------------------------------------------------------------------


def mount(*args: str) -> str | None:
    """None when the mount worked, else why not."""
    if shutil.which("mount") is None:
        return "no mount command"
    finished = subprocess.run(["mount", *args], capture_output=True, text=True)
    return None if finished.returncode == 0 else (finished.stderr.strip() or f"mount exited {finished.returncode}")


def umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def full_disk_probes(work: Path) -> list[Row]:
    point = work / "tmpfs"
    point.mkdir()
    why = mount("-t", "tmpfs", "-o", "size=4m", "tmpfs", str(point))
    if why is not None:
        return [Row("full disk", "503 storage code; recovers", f"skipped: cannot mount a tmpfs ({why})", "skip")]
    server = Server(point / "data", write_settings(work / "full.toml"), work / "full.log")
    rows = []
    try:
        server.start()
        with httpx.Client(base_url=server.base, headers=AUTH, timeout=30) as client:
            first = client.post(
                "/v1/projects/full/sessions/s1/events", json={"events": [{"role": "user", "content": "x"}]}
            )
            filler = point / "filler"
            with filler.open("wb") as out, contextlib.suppress(OSError):
                while True:
                    out.write(b"\0" * 65536)
                    out.flush()
            big = [{"role": "user", "content": "y" * 4000} for _ in range(100)]
            answer = client.post("/v1/projects/full/sessions/s1/events", json={"events": big})
            ok = answer.status_code == 503 and code_of(answer).startswith("storage")
            rows.append(
                Row.check(
                    "write on a full disk",
                    "503 storage_* code",
                    f"{summary(answer)} (first write {first.status_code})",
                    ok,
                )
            )
            new = client.post("/v1/projects/newproj/sessions/s1/events", json={"events": [{"role": "user"}]})
            listed = client.get("/v1/projects").json().get("projects", [])
            ok = new.status_code == 503 and "newproj" not in listed
            rows.append(
                Row.check(
                    "new project on a full disk",
                    "503; project not left behind",
                    f"{summary(new)}; listed: {listed}",
                    ok,
                )
            )
            filler.unlink()
            again = client.post(
                "/v1/projects/full/sessions/s1/events", json={"events": [{"role": "user", "content": "z"}]}
            )
            alive = server.process is not None and server.process.poll() is None
            rows.append(
                Row.check(
                    "space freed again",
                    "200 without a restart",
                    f"{summary(again)}; server up: {alive}",
                    again.status_code == 200 and alive,
                )
            )
    except RuntimeError as exc:
        rows.append(Row("full disk", "server runs", f"server failed: {exc}", "FAIL"))
    finally:
        server.stop()
        umount(point)
    return rows


def read_only_probes(work: Path) -> list[Row]:
    source, point = work / "ro-source", work / "ro"
    source.mkdir()
    point.mkdir()
    settings = write_settings(work / "ro.toml")
    seeded = Server(source / "data", settings, work / "ro-seed.log")
    seeded.start()
    httpx.post(
        f"{seeded.base}/v1/projects/ro/sessions/s1/events",
        json={"events": [{"role": "user", "content": "kept"}]},
        headers=AUTH,
    )
    seeded.stop()  # a stopped server leaves the -wal and -shm files beside its database
    seed_closed_cleanly(source / "data", "clean")  # no -wal or -shm file: none can be made read-only
    why = mount("--bind", str(source), str(point)) or mount("-o", "remount,bind,ro", str(point))
    if why is not None:
        umount(point)
        return [
            Row("read-only data directory", "503 storage code", f"skipped: cannot bind-mount read-only ({why})", "skip")
        ]
    server = Server(point / "data", settings, work / "ro.log")
    rows = []
    try:
        server.start()
        with httpx.Client(base_url=server.base, headers=AUTH, timeout=30) as client:
            read = client.get("/v1/projects/ro/status")
            write = client.post(
                "/v1/projects/ro/sessions/s1/events", json={"events": [{"role": "user", "content": "new"}]}
            )
            ok = write.status_code == 503 and code_of(write).startswith("storage") and read.status_code == 200
            rows.append(
                Row.check(
                    "write to a read-only data dir",
                    "503 storage_* code; reads 200",
                    f"write {summary(write)}; read {summary(read)}",
                    ok,
                )
            )
            status = client.get("/v1/projects/clean/status")
            search = client.post("/v1/projects/clean/search", json={"query": "closed cleanly"})
            hits = len(search.json().get("hits", [])) if search.status_code == 200 else 0
            rows.append(
                Row.check(
                    "read-only, database closed cleanly",
                    "status 200; search 200 with the event's observation",
                    f"status {summary(status)}; search {summary(search)}, {hits} hit(s)",
                    status.status_code == 200 and hits == 1,
                )
            )
            why = mount("-o", "remount,bind,rw", str(point))
            again = client.post(
                "/v1/projects/clean/sessions/s1/events", json={"events": [{"role": "user", "content": "after"}]}
            )
            alive = server.process is not None and server.process.poll() is None
            observed = f"remount: {why or 'ok'}; write {summary(again)}; server up: {alive}"
            ok = why is None and again.status_code == 200 and alive
            rows.append(Row.check("data dir writable again", "200 without a restart", observed, ok))
    except RuntimeError as exc:
        rows.append(
            Row(
                "read-only data directory",
                "server starts, reads work, writes 503",
                f"server did not start: {exc}",
                "FAIL",
            )
        )
    finally:
        server.stop()
        umount(point)
    return rows


def seed_closed_cleanly(data_dir: Path, project: str) -> None:
    """A project with one event and an observation of it, written by a service that then closes."""
    from obsmem.app import Obsmem
    from obsmem.settings import load_settings

    with Obsmem(load_settings(data_dir=data_dir)) as service:
        service.append_events(project, "s1", [{"role": "user", "content": "written, then closed cleanly"}])
        note = {"session_id": "s1", "content": "the project was closed cleanly", "timestamp": "2026-01-03 10:00",
                "source_refs": [1]}  # fmt: skip
        service.add_observations(project, [note])


# -- main -----------------------------------------------------------------------------------------------


def break_a_project(data_dir: Path) -> None:
    """Project ``broken``: a valid database whose ``sessions`` table is gone (an unexpected server error)."""
    from obsmem.app import Obsmem
    from obsmem.settings import load_settings

    with Obsmem(load_settings(data_dir=data_dir)) as service:
        service.append_events("broken", "s1", [{"role": "user", "content": "soon broken"}])
    conn = apsw.Connection(str(data_dir / "projects" / "broken" / "obsmem.db"))
    try:
        conn.execute("DROP TABLE sessions")
    finally:
        conn.close()


def table(rows: list[Row]) -> str:
    lines = ["| probe | expected | observed | result |", "| --- | --- | --- | --- |"]
    lines += [f"| {r.probe} | {r.expected} | {r.observed} | {r.result} |" for r in rows]
    return "\n".join(lines)


def run(work: Path) -> list[Row]:
    data_dir = work / "data"
    data_dir.mkdir(parents=True)
    break_a_project(data_dir)
    server = Server(data_dir, write_settings(work / "obsmem.toml"), work / "server.log")
    server.start()
    rows: list[Row] = []
    groups: list[Callable[[], list[Row]]]
    try:
        with httpx.Client(base_url=server.base, headers=AUTH, timeout=30) as client:
            groups = [
                lambda: number_probes(server, client),
                lambda: secret_probes(server, client),
                lambda: server_error_probe(server),
                lambda: slow_client_probes(server),
                lambda: capacity_probes(server),
                lambda: stream_probes(server, client),
                lambda: auth_probes(server),  # last on this server: it leaves 127.0.0.1 rate limited
            ]
            for group in groups:
                rows += group()
        time.sleep(LIMITS["keep_alive_seconds"])
        server.stop()
        server = Server(
            data_dir, write_settings(work / "obsmem-kill.toml", auth_failures_per_minute=1000), work / "server-kill.log"
        )
        server.start()
        rows += kill9_probe(server)
    finally:
        server.stop()
    rows += full_disk_probes(work)
    rows += read_only_probes(work)
    return rows


@contextlib.contextmanager
def workspace(keep: str | None) -> Iterator[Path]:
    if keep:
        path = Path(keep)
        path.mkdir(parents=True, exist_ok=False)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="obsmem-chaos-") as tmp:
        yield Path(tmp)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", help="a new directory to keep the data directories and server logs in")
    args = parser.parse_args()
    started = time.monotonic()
    with workspace(args.keep) as work:
        rows = run(work)
    counts = {result: sum(r.result == result for r in rows) for result in ("pass", "FAIL", "skip")}
    report = {"rows": [asdict(r) for r in rows], "counts": counts, "seconds": round(time.monotonic() - started, 1)}
    print(json.dumps(report, indent=1))
    print()
    print(table(rows))
    return 0 if counts["FAIL"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
