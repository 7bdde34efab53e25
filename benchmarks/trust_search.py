"""What notes add to an exact search: latency with 0 to N notes beside a corpus of observations.

    python benchmarks/trust_search.py --observations 20000 --notes 0 1000 10000 --repeat 200 --out bench-out

Prints one JSON document: for each note count and query, the median and p95 latency of ``Obsmem.search``
(exact mode, limit 20, ``trust`` trusted and all) with judging off, and with the human judge on (the
search then hands its query to the judging thread, which must not show in the latency). Half the notes
are trusted. Databases are cached under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from obsmem.app import Obsmem
from obsmem.settings import load_settings

QUERIES = ["MapToolArguments", "deploy", "error", "zz-no-such-text"]
WORDS = ["deploy", "error", "login", "cache", "token", "release", "retry", "config", "schema", "worker"]


def build(data: Path, project: str, observations: int, notes: int) -> None:
    with Obsmem(load_settings(data_dir=data, trust={"judge": {"provider": "none"}})) as service:
        if service.projects.exists(project):
            return
        batch = 1000
        for start in range(0, observations, batch):
            size = min(batch, observations - start)
            receipt = service.append_events(project, "s1", [{"role": "user", "content": "e"}] * size)
            first = receipt.last_seq - size + 1
            items = [
                {
                    "session_id": "s1",
                    "content": f"observation {start + i} about {WORDS[(start + i) % len(WORDS)]}"
                    + (" MapToolArguments" if (start + i) % 997 == 0 else ""),
                    "timestamp": f"2026-0{1 + (start + i) % 9}-1{(start + i) % 10} 10:00",
                    "source_refs": [first + i],
                }
                for i in range(size)
            ]
            service.add_observations(project, items)
        db = service.database(project)
        for n in range(notes):
            service.save_note(project, f"note {n}: {WORDS[n % len(WORDS)]} with {WORDS[(n * 7) % len(WORDS)]}")
        with db.write() as conn:
            conn.execute("UPDATE notes SET status = 'trusted' WHERE id % 2 = 0")


def measure(service: Obsmem, project: str, query: str, trust: str, repeat: int) -> dict[str, float]:
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        service.search(project, query, trust=trust)
        timings.append((time.perf_counter() - started) * 1000)
    timings.sort()
    return {"median_ms": round(statistics.median(timings), 3), "p95_ms": round(timings[int(0.95 * len(timings))], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--observations", type=int, default=20000)
    parser.add_argument("--notes", type=int, nargs="+", default=[0, 1000, 10000])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    args = parser.parse_args()
    results: list[dict[str, Any]] = []
    for notes in args.notes:
        data = args.out / f"trust-{args.observations}-{notes}"
        build(data, "bench", args.observations, notes)
        for provider in ("none", "human"):
            settings = load_settings(data_dir=data, trust={"judge": {"provider": provider}})
            with Obsmem(settings) as service:
                for query in QUERIES:
                    for trust in ("trusted", "all"):
                        figures = measure(service, "bench", query, trust, args.repeat)
                        row = {"notes": notes, "judge": provider, "query": query, "trust": trust, **figures}
                        results.append(row)
    print(json.dumps({"observations": args.observations, "repeat": args.repeat, "results": results}, indent=1))


if __name__ == "__main__":
    main()
