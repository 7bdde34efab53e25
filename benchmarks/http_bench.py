"""HTTP benchmark: exact search under concurrent load, and event ingest, over loopback.

    python benchmarks/http_bench.py                      # 50k observations, 16 clients, 20 s
    python benchmarks/http_bench.py --seconds 5 --observations 10000 --data-dir /tmp/obsmem-bench

1. Builds (or reuses, with ``--data-dir``) a project of synthetic observations through the Python API:
   one event per line of benchmarks/corpus.py and one observation citing it.
2. Starts the server as it ships (``python -m obsmem.surfaces.http``, uvicorn) in its own process.
3. Runs the load generator in another process: ``--concurrency`` keep-alive connections, each sending
   its next request as soon as the last answer arrived (closed loop), for ``--seconds`` after a warm-up.
   Queries mix planted rare identifiers (``MapToolArguments``, ``#2510``), generated identifiers, error
   names, common words, two-character needles, paths and date-filtered searches. Any status but 200,
   or a broken connection, counts as an error.
   The search load runs ``--runs`` times (default 3); the median run (by requests/s) is reported in
   full and judged against the target, the others in brief. The machine's load average is recorded,
   since the server and the load generator share its cores with whatever else runs, and so is the CPU
   time the server process used per second of each run (``server_cpu_share``, 1.0 = one full core) and
   requests per second of server CPU: its capacity with a core to itself.
4. Ingest: batches of 500 events posted one after another to fresh sessions (events/s), then the same
   with 4 clients in parallel.

Prints one JSON document: requests/s, latency percentiles (overall and per query class), errors.
The load generator speaks HTTP/1.1 directly on asyncio streams, so its own cost stays small next to
the server's (both share this machine's cores).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PROJECT = "bench"
INGEST_PROJECT = "ingest"
BATCH = 500


# -- corpus and queries -------------------------------------------------------------------------


def corpus_sessions(observations: int, per_session: int = 1000, seed: int = 7):
    """``(session_id, events, observations)``: one event per line of benchmarks/corpus.py and one
    observation citing it, dated three minutes apart."""
    sys.path.insert(0, str(HERE))
    from corpus import line

    rng = random.Random(seed)
    start = datetime(2025, 1, 1, 9, 0)
    made = 0
    while made < observations:
        count = min(per_session, observations - made)
        session = f"bench-{made // per_session:04d}"
        events: list[dict[str, Any]] = []
        notes: list[dict[str, Any]] = []
        for seq in range(1, count + 1):
            index = made + seq - 1
            text = line(rng, index)
            events.append({"seq": seq, "role": "assistant" if seq % 2 else "user", "content": text})
            notes.append(
                {
                    "session_id": session,
                    "content": text,
                    "timestamp": (start + timedelta(minutes=3 * index)).strftime("%Y-%m-%d %H:%M"),
                    "importance": rng.choice(("low", "medium", "medium", "high", "critical")),
                    "source_refs": [seq],
                }
            )
        yield session, events, notes
        made += count


def build_corpus(data_dir: Path, observations: int) -> dict[str, Any]:
    """Write the corpus through the Python API (events first, then observations citing them)."""
    from obsmem.app import Obsmem

    with Obsmem(data_dir=data_dir) as service:
        if PROJECT in service.project_names() and service.status(PROJECT).observations >= observations:
            return {"observations": service.status(PROJECT).observations, "built_seconds": None}
        started = time.perf_counter()
        stored = 0
        for session, events, notes in corpus_sessions(observations):
            for first in range(0, len(events), BATCH):
                service.append_events(PROJECT, session, events[first : first + BATCH])
            receipt = service.add_observations(PROJECT, notes)
            stored += len(receipt.added) + len(receipt.duplicates)
        return {"observations": stored, "built_seconds": round(time.perf_counter() - started, 2)}


def query_mix(seed: int = 11) -> list[tuple[str, dict[str, Any]]]:
    """``(class, body)`` pairs, weighted by repetition: mostly identifiers, as agents search."""
    sys.path.insert(0, str(HERE))
    from corpus import ERRORS, PLANTED, WORDS, identifier

    rng = random.Random(seed)
    mix: list[tuple[str, dict[str, Any]]] = []
    for planted in PLANTED:
        mix += [("rare_identifier", {"query": planted})] * 10
    for _ in range(30):
        mix.append(("identifier", {"query": identifier(rng)}))
    for name in ERRORS:
        mix.append(("error_name", {"query": name}))
    for word in rng.sample(WORDS, 6):
        mix.append(("common_word", {"query": word}))
    for short in ("db", "v1", "#9"):
        mix.append(("two_characters", {"query": short}))
    for path in ("src/billing/", "tests/e2e", ".py:12"):
        mix.append(("path", {"query": path}))
    for _ in range(4):
        mix.append(("date_filtered", {"query": identifier(rng), "after": "2025-03-01", "before": "2025-04-15 12:00"}))
    mix.append(("date_filtered", {"query": "error", "after": "2025-03-01", "limit": 50}))
    return mix


# -- server ---------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(data_dir: Path, port: int, extra_env: dict[str, str]) -> subprocess.Popen[bytes]:
    env = {**os.environ, **extra_env}
    command = [sys.executable, "-m", "obsmem.surfaces.http", "--data-dir", str(data_dir), "--port", str(port)]
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                if b" 200 " in sock.recv(200):
                    return server
        except OSError:
            time.sleep(0.1)
        if server.poll() is not None:
            raise RuntimeError(f"server exited: {server.stderr.read().decode() if server.stderr else ''}")
    server.kill()
    raise RuntimeError("server did not start within 30 s")


# -- load generator (runs in its own process) -------------------------------------------------------


def request_bytes(port: int, path: str, body: dict[str, Any]) -> bytes:
    payload = json.dumps(body).encode("utf-8")
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode("ascii") + payload


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> tuple[int, bytes]:
    writer.write(request)
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("connection closed")
    length = 0
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    body = await reader.readexactly(length)
    return int(status_line.split()[1]), body


async def search_load(port: int, concurrency: int, seconds: float, warmup: float) -> dict[str, Any]:
    mix = query_mix()
    path = f"/v1/projects/{PROJECT}/search"
    requests = [(cls, request_bytes(port, path, body)) for cls, body in mix]
    samples: list[tuple[str, float]] = []
    errors = 0
    start = time.perf_counter()
    measure_from = start + warmup
    deadline = measure_from + seconds

    async def client(number: int) -> None:
        nonlocal errors
        rng = random.Random(number)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while True:
                cls, request = requests[rng.randrange(len(requests))]
                sent = time.perf_counter()
                if sent >= deadline:
                    return
                try:
                    status, body = await exchange(reader, writer, request)
                except (ConnectionError, asyncio.IncompleteReadError, ValueError):
                    errors += 1
                    writer.close()
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    continue
                done = time.perf_counter()
                if sent >= measure_from:
                    samples.append((cls, done - sent))
                    if status != 200 or not body.startswith(b'{"mode"'):
                        errors += 1
        finally:
            writer.close()

    await asyncio.gather(*(client(n) for n in range(concurrency)))
    latencies = [lat for _, lat in samples]
    by_class: dict[str, list[float]] = {}
    for cls, lat in samples:
        by_class.setdefault(cls, []).append(lat)
    return {
        "concurrency": concurrency,
        "seconds": seconds,
        "requests": len(samples),
        "requests_per_second": round(len(samples) / seconds, 1),
        "errors": errors,
        "latency_ms": percentiles(latencies),
        "by_class_ms": {
            cls: percentiles(values) | {"requests": len(values)} for cls, values in sorted(by_class.items())
        },
    }


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)

    return {
        "p50": at(0.50),
        "p95": at(0.95),
        "p99": at(0.99),
        "max": round(ordered[-1] * 1000, 3),
        "mean": round(statistics.fmean(ordered) * 1000, 3),
    }


async def ingest_load(port: int, batches: int, clients: int, tag: str) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    from corpus import line

    rng = random.Random(3)
    texts = [line(rng, index) for index in range(2000)]
    errors = 0
    events_sent = 0

    async def client(number: int) -> None:
        nonlocal errors, events_sent
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for batch in range(batches):
                session = f"{tag}-{number}-{batch // 10}"  # 10 batches (5000 events) per session
                first = (batch % 10) * BATCH + 1
                events = [
                    {"seq": first + i, "role": "assistant" if i % 2 else "user", "content": texts[(first + i) % 2000]}
                    for i in range(BATCH)
                ]
                path = f"/v1/projects/{INGEST_PROJECT}/sessions/{session}/events"
                status, body = await exchange(reader, writer, request_bytes(port, path, {"events": events}))
                if status != 200 or json.loads(body).get("appended") != BATCH:
                    errors += 1
                else:
                    events_sent += BATCH
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(client(n) for n in range(clients)))
    elapsed = time.perf_counter() - started
    return {
        "clients": clients,
        "batch_size": BATCH,
        "batches": batches * clients,
        "events": events_sent,
        "seconds": round(elapsed, 2),
        "events_per_second": round(events_sent / elapsed, 0),
        "errors": errors,
    }


def run_load(args: argparse.Namespace) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    if args.load == "search":
        result = asyncio.run(search_load(args.port, args.concurrency, args.seconds, args.warmup))
    else:
        result = asyncio.run(ingest_load(args.port, args.batches, args.clients, args.tag))
    print(json.dumps(result))


def load_process(args: list[str]) -> dict[str, Any]:
    output = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True)
    return json.loads(output.stdout)


# -- main -------------------------------------------------------------------------------------------


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (Linux /proc), to tell the server's own cost from contention."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured_run(server: subprocess.Popen[bytes], port: int, args: argparse.Namespace) -> dict[str, Any]:
    """One search run, with the CPU time the server process used during it."""
    cpu_before, started = process_cpu_seconds(server.pid), time.perf_counter()
    run = load_process(search_args(port, args))
    cpu_after, elapsed = process_cpu_seconds(server.pid), time.perf_counter() - started
    if cpu_before is not None and cpu_after is not None:
        # The warm-up is inside the window too; its requests are not counted, so this slightly
        # overstates the CPU per request.
        busy = (cpu_after - cpu_before) / elapsed
        run["server_cpu_share"] = round(busy, 2)
        run["requests_per_server_cpu_second"] = round(run["requests_per_second"] / busy, 1) if busy else None
    return run


def search_args(port: int, args: argparse.Namespace) -> list[str]:
    return ["--load", "search", "--port", str(port), "--concurrency", str(args.concurrency),
            "--seconds", str(args.seconds), "--warmup", str(args.warmup)]  # fmt: skip


def ingest_args(port: int, batches: int, clients: int, tag: str) -> list[str]:
    return ["--load", "ingest", "--port", str(port), "--batches", str(batches), "--clients", str(clients),
            "--tag", tag]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--observations", type=int, default=50_000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds per search run")
    parser.add_argument("--runs", type=int, default=3, help="search runs; the median run is reported")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--batches", type=int, default=40, help="ingest batches of 500 per client")
    parser.add_argument("--data-dir", help="reuse this data directory (default: a temporary one)")
    parser.add_argument("--server-env", action="append", default=[], help="NAME=VALUE for the server")
    parser.add_argument("--load", choices=["search", "ingest"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--clients", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--tag", default="run", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load:
        run_load(args)
        return

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="obsmem-http-bench-") as scratch:
        data_dir = Path(args.data_dir or scratch)
        corpus = build_corpus(data_dir, args.observations)
        port = free_port()
        extra_env = dict(item.split("=", 1) for item in args.server_env)
        server = start_server(data_dir, port, extra_env)
        try:
            runs = [measured_run(server, port, args) for _ in range(args.runs)]
            tag = f"t{int(time.time())}"
            ingest_one = load_process(ingest_args(port, args.batches, 1, tag + "a"))
            ingest_four = load_process(ingest_args(port, max(1, args.batches // 4), 4, tag + "b"))
        finally:
            server.terminate()
            server.wait(timeout=30)
    import platform

    median_run = sorted(runs, key=lambda run: run["requests_per_second"])[len(runs) // 2]
    target = {"requests_per_second": 500, "p99_ms": 50, "errors": 0}
    met = (
        median_run["requests_per_second"] >= target["requests_per_second"]
        and median_run["latency_ms"].get("p99", 1e9) <= target["p99_ms"]
        and sum(run["errors"] for run in runs) == 0
    )
    summary = [
        {"requests_per_second": run["requests_per_second"], "p50_ms": run["latency_ms"].get("p50"),
         "p99_ms": run["latency_ms"].get("p99"), "errors": run["errors"],
         "server_cpu_share": run.get("server_cpu_share"),
         "requests_per_server_cpu_second": run.get("requests_per_server_cpu_second")}
        for run in runs
    ]  # fmt: skip
    print(
        json.dumps(
            {
                "benchmark": "http",
                "machine": {
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "load_average_before": [round(x, 2) for x in load_before],
                    "load_average_after": [round(x, 2) for x in os.getloadavg()],
                },
                "corpus": corpus,
                "server": {"command": "python -m obsmem.surfaces.http", "env": extra_env},
                "search_runs": summary,
                "search_median_run": median_run,
                "search_target": target | {"met": met},
                "ingest_sequential": ingest_one,
                "ingest_parallel": ingest_four,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
