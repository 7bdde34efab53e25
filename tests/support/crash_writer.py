"""A writer that ingests forever and prints an acknowledgement after every commit returns.

Run by test_crash_safety.py as ``python -m support.crash_writer DATA_DIR SEED`` (see support.processes), which
kills it with SIGKILL at random moments.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from obsmem.events import append_events
from obsmem.memories import add_observations
from obsmem.projects import ProjectRegistry


def main(data_dir: str, seed: int) -> None:
    rng = random.Random(seed)
    db = ProjectRegistry(Path(data_dir)).get("crash", create=True)
    sessions = ["alpha", "beta", "gamma"]
    n = 0
    while True:
        n += 1
        session = rng.choice(sessions)
        size = rng.randint(1, 60)
        events = [
            {
                "role": rng.choice(["user", "assistant"]),
                "content": f"round {seed} batch {n} item {i} " + "x" * rng.randint(0, 300),
            }
            for i in range(size)
        ]
        receipt = append_events(db, session, events)
        print(f"E {session} {receipt.last_seq - receipt.appended + 1} {receipt.last_seq}", flush=True)
        if rng.random() < 0.5:
            items = [
                {
                    "session_id": session,
                    "timestamp": f"2026-0{rng.randint(1, 9)}-1{rng.randint(0, 9)} 10:{rng.randint(10, 59)}",
                    "content": f"observation {seed}-{n}-{k} about MapToolArguments",
                    "importance": "low",
                    "source_refs": [receipt.last_seq - rng.randint(0, receipt.appended - 1)],
                }
                for k in range(rng.randint(1, 8))
            ]
            result = add_observations(db, items)
            assert not result.rejected, result.rejected
            for added in result.added:
                print(f"O {added.memory_id}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
