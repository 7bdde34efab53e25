"""How long the instant projection takes: a session with 2,000 observations and 100 reflections.

Times ``Obsmem.memory(project, session)`` end to end (read transaction, query, rendering) and, apart,
the rendering of already-loaded rows, over ``--repeat`` runs after a warm-up. Prints JSON with p50/p90/p99
in milliseconds and the size of the rendered text. Target: p50 <= 20 ms.

    python benchmarks/projection.py --observations 2000 --reflections 100 --repeat 200
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import line  # noqa: E402

from obsmem.app import Obsmem  # noqa: E402
from obsmem.memories import ReflectionIn, add_reflection  # noqa: E402
from obsmem.pipeline import active_memory, render_projection  # noqa: E402
from obsmem.settings import load_settings  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def stats(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {key: round(percentile(ms, q), 3) for key, q in (("p50_ms", 0.5), ("p90_ms", 0.9), ("p99_ms", 0.99))}


def build(memory: Obsmem, observations: int, reflections: int, seed: int) -> None:
    rng = random.Random(seed)
    start = datetime(2026, 3, 1, 9, 0)
    memory.append_events("bench", "s1", [{"role": "user", "content": f"turn {n}"} for n in range(1, 501)])
    items = []
    for n in range(observations):
        stamp = (start + timedelta(minutes=3 * n)).strftime("%Y-%m-%d %H:%M")
        items.append(
            {
                "session_id": "s1",
                "timestamp": stamp,
                "content": line(rng, n),
                "importance": rng.choice(["low", "medium", "medium", "high", "critical"]),
                "source_refs": [rng.randint(1, 500)],
            }
        )
    receipt = memory.add_observations("bench", items)
    ids = [entry.memory_id for entry in receipt.added]
    db = memory.database("bench")
    with db.write() as conn:
        for n in range(reflections):
            support = tuple(rng.sample(ids, 5))
            stamp = (start + timedelta(hours=n)).strftime("%Y-%m-%d %H:%M")
            add_reflection(conn, ReflectionIn("s1", f"Reflection {n}: " + line(rng, n), support, stamp))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--observations", type=int, default=2000)
    parser.add_argument("--reflections", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="obsmem-bench-") as tmp:
        memory = Obsmem(load_settings(data_dir=Path(tmp)))
        build(memory, args.observations, args.reflections, args.seed)
        for _ in range(10):
            memory.memory("bench", "s1")
        end_to_end: list[float] = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            projection = memory.memory("bench", "s1")
            end_to_end.append(time.perf_counter() - started)
        db = memory.database("bench")
        with db.read() as conn:
            items = active_memory(conn, "s1")
        rendering: list[float] = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            render_projection("s1", items)
            rendering.append(time.perf_counter() - started)
        deterministic = memory.memory("bench", "s1").text == projection.text
        memory.close()
    print(
        json.dumps(
            {
                "benchmark": "projection",
                "observations": projection.observations,
                "reflections": projection.reflections,
                "text_chars": len(projection.text),
                "text_tokens_estimate": projection.tokens,
                "repeat": args.repeat,
                "end_to_end": stats(end_to_end),
                "render_only": stats(rendering),
                "deterministic": deterministic,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
