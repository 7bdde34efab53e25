"""Event ingest throughput through the Python API, in batches.

    python benchmarks/ingest.py --events 100000 --batch 500

Prints JSON: events/s over the whole run (and per CPU-second of the process, the figure to compare on a
shared machine) and the median and p95 time per batch. Each batch is one
``BEGIN IMMEDIATE`` transaction committed with ``synchronous=FULL`` (durable when acknowledged).
Events are realistic: user requests, tool calls with JSON arguments and tool results of varying size.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import line  # noqa: E402

from obsmem.events import append_events  # noqa: E402
from obsmem.projects import ProjectRegistry  # noqa: E402


def make_events(count: int, seed: int = 3) -> list[dict[str, object]]:
    rng = random.Random(seed)
    events: list[dict[str, object]] = []
    for index in range(count):
        kind = index % 4
        if kind == 0:
            events.append({"role": "user", "content": line(rng, index)})
        elif kind == 1:
            events.append(
                {
                    "role": "assistant",
                    "type": "tool_call",
                    "tool_name": "read_file",
                    "tool_args": {"path": f"src/mod_{rng.randint(1, 99)}.py", "start": rng.randint(1, 500)},
                }
            )
        elif kind == 2:
            events.append(
                {
                    "role": "tool",
                    "type": "tool_result",
                    "tool_name": "read_file",
                    "content": "\n".join(line(rng, index + k) for k in range(rng.randint(1, 12))),
                }
            )
        else:
            events.append({"role": "assistant", "content": line(rng, index)})
    return events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--sessions", type=int, default=20)
    args = parser.parse_args()
    events = make_events(args.events)
    with tempfile.TemporaryDirectory() as tmp:
        registry = ProjectRegistry(Path(tmp))
        db = registry.get("ingest", create=True)
        batch_ms: list[float] = []
        started, cpu_started = time.perf_counter(), time.process_time()
        for number, start in enumerate(range(0, len(events), args.batch)):
            session = f"session-{number % args.sessions}"
            t0 = time.perf_counter()
            receipt = append_events(db, session, events[start : start + args.batch])
            batch_ms.append((time.perf_counter() - t0) * 1000)
            assert receipt.appended == len(events[start : start + args.batch])
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
        stored = db.query("SELECT count(*) FROM events")[0][0]
        registry.close()
    ordered = sorted(batch_ms)
    print(
        json.dumps(
            {
                "benchmark": "ingest_python_api",
                "events": stored,
                "batch_size": args.batch,
                "elapsed_s": round(elapsed, 3),
                "events_per_s": round(stored / elapsed),
                "cpu_s": round(cpu, 3),
                "events_per_cpu_s": round(stored / cpu),
                "batch_ms": {
                    "p50": round(statistics.median(ordered), 2),
                    "p95": round(ordered[int(0.95 * (len(ordered) - 1))], 2),
                },
                "target_events_per_s": 20_000,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
