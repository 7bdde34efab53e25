"""What a Reflector + Dropper cycle over a 40k-token pool costs besides the model calls.

One session with ``--observations`` observations (~25 tokens each: ~42,500 tokens with the defaults, over
the 40,000-token reflection threshold and the 30,000-token Dropper target), and a scripted
OpenAI-compatible server on loopback that answers at once: the Reflector records ``--reflections``
reflections citing three observations each, the Dropper proposes every observation it is shown (so the
server's ranking and cap do all the deciding: ~500 drops to bring the pool under its target). The reflect
job runs in this thread through the worker pool, as a worker runs it, with the default settings.

Measured per run:

- ``db_ms``: time inside the job's database transactions, Python work done in them included (claiming
  the job and completing it; reading the pool; the claim with its start event; the Dropper's start event;
  the promotion with its reflections, drop records, pointer move, end events and commit). SQLite's own
  statement profile only has millisecond resolution, so the transactions are timed instead;
- ``model_ms``: time inside the chat client's calls (HTTP to the scripted server, JSON both ways);
- ``other_ms``: the rest (prompt building, checking the model's items, ranking), in Python;
- ``total_ms``: the whole job.

Target: ``db_ms`` <= 50 (what a cycle adds to the database beyond the model calls). Prints JSON.

    python benchmarks/reflect_cycle.py --repeat 7
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from obsmem.app import Obsmem  # noqa: E402
from obsmem.memories import add_observations  # noqa: E402
from obsmem.pipeline import ChatClient  # noqa: E402
from obsmem.settings import load_settings  # noqa: E402
from obsmem.storage.connection import ProjectDatabase  # noqa: E402
from support.scripted_chat import DropperScript, ObserverScript, PipelineScript, ReflectorScript, ScriptedChatServer  # noqa: E402

WORDS = [
    "the",
    "login",
    "test",
    "fails",
    "with",
    "AuthExpired",
    "in",
    "src/auth/session.py:142",
    "after",
    "the",
    "token",
    "refresh;",
    "user",
    "prefers",
    "pytest",
    "-x",
    "and",
    "small",
    "commits;",
    "deploy",
    "target",
    "eu-west-1;",
    "retry",
    "policy",
    "set",
    "to",
    "three",
    "attempts",
    "with",
    "backoff",
]


def sentence(rng: random.Random, n: int, chars: int = 96) -> str:
    words = [f"#{n}"]
    while len(" ".join(words)) < chars:
        words.append(rng.choice(WORDS))
    return " ".join(words)[:chars]


def build(memory: Obsmem, observations: int, seed: int) -> None:
    rng = random.Random(seed)
    start = datetime(2026, 5, 1, 9, 0)
    batch = 500
    for first in range(0, observations, batch):
        count = min(batch, observations - first)
        memory.append_events(
            "bench",
            "s1",
            [
                {
                    "role": "user",
                    "content": sentence(rng, first + i, 200),
                    "created_at": (start + timedelta(minutes=first + i)).strftime("%Y-%m-%dT%H:%M:00Z"),
                }
                for i in range(count)
            ],
        )
    receipt = add_observations(
        memory.database("bench"),
        [
            {
                "session_id": "s1",
                "content": sentence(rng, n),
                "timestamp": (start + timedelta(minutes=n)).strftime("%Y-%m-%d %H:%M"),
                "importance": rng.choice(["low", "medium", "medium", "high", "critical"]),
                "source_refs": [n + 1],
            }
            for n in range(observations)
        ],
    )
    assert len(receipt.added) == observations


class DbTimer:
    """Wall time inside ``ProjectDatabase.write()`` / ``.read()`` blocks (the outermost ones of a thread)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.transactions: list[tuple[str, float]] = []
        self._real = (ProjectDatabase.write, ProjectDatabase.read)
        self._depth = threading.local()

    def _wrap(self, real: Any, kind: str) -> Any:
        timer = self

        @contextlib.contextmanager
        def timed(db: ProjectDatabase) -> Iterator[Any]:
            depth = getattr(timer._depth, "value", 0)
            timer._depth.value = depth + 1
            started = time.perf_counter()
            try:
                with real(db) as conn:
                    yield conn
            finally:
                timer._depth.value = depth
                if depth == 0:
                    elapsed = time.perf_counter() - started
                    timer.seconds += elapsed
                    timer.transactions.append((kind, round(elapsed * 1000, 2)))

        return timed

    def __enter__(self) -> DbTimer:
        ProjectDatabase.write = self._wrap(self._real[0], "write")  # type: ignore[method-assign]
        ProjectDatabase.read = self._wrap(self._real[1], "read")  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        ProjectDatabase.write, ProjectDatabase.read = self._real  # type: ignore[method-assign]


class ModelTimer:
    """Time spent inside ChatClient.complete (the model calls, HTTP included)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self._real = ChatClient.complete

    def __enter__(self) -> ModelTimer:
        timer = self
        real = self._real

        def timed(client: ChatClient, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return real(client, *args, **kwargs)
            finally:
                timer.seconds += time.perf_counter() - started
                timer.calls += 1

        ChatClient.complete = timed  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        ChatClient.complete = self._real  # type: ignore[method-assign]


def one_run(server: ScriptedChatServer, observations: int, seed: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="obsmem-bench-") as tmp:
        settings = load_settings(
            data_dir=Path(tmp),
            model={"base_url": server.base_url, "model_id": "scripted", "max_retries": 0},
            observer={"enabled": False},  # only the reflect job runs
        )
        memory = Obsmem(settings)
        build(memory, observations, seed)
        db = memory.database("bench")
        memory.pipeline.queue(db).enqueue(
            "reflect", {"session_id": "s1", "force": True}, order_key="session:s1", dedupe_key="bench"
        )
        pool = memory.worker_pool()
        # A worker builds each role's HTTP client once (about 40 ms, mostly loading the CA bundle) and then
        # reuses it for every job: build them first, as in a worker that has run before.
        for role in ("reflector", "dropper"):
            memory.pipeline.clients.get(role)
        with ModelTimer() as model, DbTimer() as database:
            started = time.perf_counter()
            assert pool.run_next()
            total = time.perf_counter() - started
        status = memory.session_status("bench", "s1")
        events = {e.type: e.to_dict() for e in memory.pipeline_events("bench", limit=1000)}
        memory.close()
    db_seconds = database.seconds
    assert status.generation_count == 1, status
    return {
        "total_ms": total * 1000,
        "model_ms": model.seconds * 1000,
        "db_ms": db_seconds * 1000,
        "other_ms": (total - model.seconds - db_seconds) * 1000,
        "transactions_ms": database.transactions,
        "model_calls": model.calls,
        "reflections": events["om_reflection_end"]["reflections"],
        "proposed": events["om_dropper_end"]["proposed"],
        "dropped": events["om_dropper_end"]["dropped"],
        "tokens_before": events["om_dropper_end"]["observation_tokens_before"],
        "tokens_after": events["om_dropper_end"]["observation_tokens_after"],
        "reflector_prompt_tokens": events["om_reflection_end"]["tokens_to_reflect"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--observations", type=int, default=1700)
    parser.add_argument("--reflections", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    script = PipelineScript(
        ObserverScript(), ReflectorScript(group=3, most=args.reflections), DropperScript(everything=True)
    )
    runs = []
    with ScriptedChatServer(script) as server:
        one_run(server, args.observations, args.seed)  # warm-up: imports, first connections
        for n in range(args.repeat):
            runs.append(one_run(server, args.observations, args.seed + n))
    summary: dict[str, Any] = {"benchmark": "reflect_cycle", "observations": args.observations, "repeat": args.repeat}
    for key in ("total_ms", "model_ms", "db_ms", "other_ms"):
        values = [run[key] for run in runs]
        summary[key] = {"median": round(statistics.median(values), 2), "max": round(max(values), 2)}
    for key in (
        "model_calls",
        "reflections",
        "proposed",
        "dropped",
        "tokens_before",
        "tokens_after",
        "reflector_prompt_tokens",
    ):
        summary[key] = runs[0][key]
    summary["transactions_ms_first_run"] = runs[0]["transactions_ms"]
    summary["target_db_ms"] = 50
    summary["met"] = summary["db_ms"]["median"] <= 50
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
