"""Resident memory of ``obsmem serve`` in semantic mode: after start, after a warm-up, after many searches.

    python benchmarks/serve_memory.py --data-dir DIR [--project bench] [--searches 1000]

Runs on a data directory indexed by semantic_backfill.py (or semantic_million.py, ``--project
million``). Starts ``obsmem serve`` as it ships (semantic mode: a settings file with a ``[semantic]``
section, everything else default) in its own process on a free loopback port, then asks hybrid
searches over HTTP one after another, LoCoMo questions (real natural language) in a fixed random order,
every tenth one date-filtered. The server's memory is read from ``/proc/PID/status``:

- ``started`` — once ``/v1/health`` answers (the model and the vectors load on the first search);
- ``warmed_up`` — after ``--warm-up`` searches (default 40);
- ``after_searches`` — after ``--searches`` more (default 1,000), and the anonymous part at every tenth
  of the way, so a cache that keeps growing shows as a slope rather than a single figure.

Each figure has the resident set (``VmRSS``), its peak (``VmHWM``) and its parts: ``RssAnon``, the
process's own memory, and ``RssFile``, mostly database pages read through the memory map (shared with
the page cache, given back under memory pressure).

Prints one JSON document. Every request must answer 200; the benchmark stops at the first that does not.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from semantic_corpus import DEFAULT_SHARED  # noqa: E402

START_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# /proc/PID/status fields: the resident set, its peak, and its two parts. ``RssFile`` is mostly the
# database's pages read through the memory map (the page cache's, shared and dropped under pressure);
# ``RssAnon`` is the process's own memory (vectors, graph, model, caches): what can grow without need.
STATUS_FIELDS = {"VmRSS": "rss_mib", "VmHWM": "peak_mib", "RssAnon": "anonymous_mib", "RssFile": "file_mib"}


def resident(pid: int) -> dict[str, float]:
    """The resident set of a process and its parts, in MiB."""
    found: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in STATUS_FIELDS:
            found[STATUS_FIELDS[name]] = round(int(value.split()[0]) / 1024, 1)
    return found


def all_questions(shared: Path) -> list[str]:
    found: list[str] = []
    for sample in json.loads((shared / "locomo" / "locomo-dev5.json").read_text()):
        found.extend(qa["question"] for qa in sample["qa"])
    found = list(dict.fromkeys(found))
    random.Random(3).shuffle(found)
    return found


def start(data_dir: Path, config: Path, port: int) -> subprocess.Popen[bytes]:
    command = [str(Path(sys.executable).parent / "obsmem"), "--data-dir", str(data_dir), "--config", str(config)]
    server = subprocess.Popen(
        [*command, "serve", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"obsmem serve exited with status {server.returncode}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/v1/health")
            if connection.getresponse().status == 200:
                return server
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("obsmem serve did not answer within the start timeout")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--project", default="bench")
    parser.add_argument("--searches", type=int, default=1000)
    parser.add_argument("--warm-up", type=int, default=40)
    parser.add_argument("--shared-data", type=Path, default=DEFAULT_SHARED)
    parser.add_argument(
        "--encoder",
        default=None,
        help="[semantic.embedding] encoder the index was built with (default: the product's default); "
        "another one than the index's would start a rebuild instead of serving it",
    )
    args = parser.parse_args()
    pool = all_questions(args.shared_data)
    report: dict[str, object] = {"benchmark": "serve_memory", "project": args.project, "searches": args.searches}
    with tempfile.TemporaryDirectory() as scratch:
        config = Path(scratch) / "obsmem.toml"
        encoder = f'\n[semantic.embedding]\nencoder = "{args.encoder}"\n' if args.encoder else ""
        config.write_text(f"[semantic]\nenabled = true\n{encoder}")
        port = free_port()
        server = start(args.data_dir, config, port)
        try:
            report["started"] = resident(server.pid)
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            path = f"/v1/projects/{args.project}/search"
            times: list[float] = []

            def ask(number: int) -> None:
                body: dict[str, object] = {"query": pool[number % len(pool)], "mode": "hybrid", "limit": 10}
                if number % 10 == 9:
                    body |= {"after": "2023-05-01", "before": "2023-07-31"}
                began = time.perf_counter()
                connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
                response = connection.getresponse()
                payload = response.read()
                times.append(time.perf_counter() - began)
                if response.status != 200:
                    raise SystemExit(f"search answered {response.status}: {payload[:200]!r}")

            for number in range(args.warm_up):
                ask(number)
            report["warmed_up"] = resident(server.pid)
            times.clear()
            slope = []
            tenth = max(1, args.searches // 10)
            for number in range(args.warm_up, args.warm_up + args.searches):
                ask(number)
                if (number - args.warm_up + 1) % tenth == 0:
                    slope.append(resident(server.pid)["anonymous_mib"])
            report["after_searches"] = resident(server.pid)
            report["anonymous_mib_every_tenth"] = slope
            report["search_p50_ms"] = round(statistics.median(times) * 1000, 2)
            report["distinct_questions"] = min(len(pool), args.warm_up + args.searches)
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
    report["load_average"] = os.getloadavg()[0]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
