"""Write-ahead log size under sustained ingest with concurrent readers, with and without truncation.

    python benchmarks/wal_growth.py --batches 120 --batch 500 --readers 2

Appends ``--batches`` batches of large events (each one ``BEGIN IMMEDIATE`` transaction of several MB)
while reader threads keep running short read transactions, as searches and status calls do on a busy
server. A reader that holds a snapshot stops SQLite's automatic checkpoint from resetting the log, and
the automatic checkpoint never shrinks it anyway, so the log grows to the largest size it ever needed.
The run is repeated with obsmem's truncation switched off (the limit set beyond reach) for comparison.

Prints JSON: the largest and the final WAL size (MiB) of each run, the limit, and the batch p50/p95 time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingest import make_events  # noqa: E402

from obsmem.events import append_events  # noqa: E402
from obsmem.projects import ProjectRegistry  # noqa: E402
from obsmem.storage import connection  # noqa: E402

MIB = 1024 * 1024


def run(events: list[dict[str, Any]], *, batch: int, batches: int, readers: int, truncate: bool) -> dict[str, Any]:
    limit = connection.WAL_TRUNCATE_BYTES
    if not truncate:
        connection.WAL_TRUNCATE_BYTES = 1 << 62  # beyond reach: only SQLite's own checkpoints run
    try:
        with tempfile.TemporaryDirectory() as tmp:
            registry = ProjectRegistry(Path(tmp))
            db = registry.get("wal", create=True)
            stop = threading.Event()

            def read_loop() -> None:
                while not stop.is_set():
                    with db.read() as conn:
                        conn.execute("SELECT count(*), max(seq) FROM events").fetchall()
                        time.sleep(0.002)  # a search holds its snapshot a few milliseconds

            threads = [threading.Thread(target=read_loop, daemon=True) for _ in range(readers)]
            for thread in threads:
                thread.start()
            sizes: list[int] = []
            batch_ms: list[float] = []
            for number in range(batches):
                start = (number * batch) % max(1, len(events) - batch)
                t0 = time.perf_counter()
                append_events(db, f"session-{number}", events[start : start + batch])
                batch_ms.append((time.perf_counter() - t0) * 1000)
                sizes.append(db.wal_bytes())
            stop.set()
            for thread in threads:
                thread.join(timeout=10)
            database_bytes = db.path.stat().st_size
            registry.close()
    finally:
        connection.WAL_TRUNCATE_BYTES = limit
    ordered = sorted(batch_ms)
    return {
        "truncation": truncate,
        "max_wal_mib": round(max(sizes) / MIB, 1),
        "final_wal_mib": round(sizes[-1] / MIB, 1),
        "database_mib": round(database_bytes / MIB, 1),
        "batch_ms": {
            "p50": round(statistics.median(ordered), 1),
            "p95": round(ordered[int(0.95 * (len(ordered) - 1))], 1),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=120)
    parser.add_argument("--batch", type=int, default=500, help="Events per transaction.")
    parser.add_argument("--event-bytes", type=int, default=8000, help="Extra text per event (large tool results).")
    parser.add_argument("--readers", type=int, default=2)
    args = parser.parse_args()
    events = make_events(max(args.batch * 4, 2000))
    padding = "x" * args.event_bytes
    for event in events:
        event["content"] = f"{event.get('content', '')}\n{padding}"
    runs = [
        run(events, batch=args.batch, batches=args.batches, readers=args.readers, truncate=truncate)
        for truncate in (True, False)
    ]
    print(
        json.dumps(
            {
                "benchmark": "wal_growth",
                "batches": args.batches,
                "events_per_batch": args.batch,
                "mib_per_batch": round(args.batch * (args.event_bytes + 200) / MIB, 1),
                "readers": args.readers,
                "wal_limit_mib": connection.WAL_TRUNCATE_BYTES / MIB,
                "runs": runs,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
