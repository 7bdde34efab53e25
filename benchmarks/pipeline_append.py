"""Append latency with background observation due and running, against observation switched off.

Two data directories in one process, measured in the same run, appends alternating between them (in a
random order per round) so machine noise lands on both alike:

- **on**: the Observer is enabled, so observation becomes due as each session's backlog passes
  ``--buffer-tokens``; worker threads run in this process (as in ``obsmem serve``) against a scripted
  OpenAI-compatible server in a separate process that takes ``--model-delay`` seconds per reply and
  records one observation per ``--events-per-observation`` events. The append path does its backlog
  bookkeeping and queues jobs; the workers call the model and commit observations meanwhile.
- **off**: ``observer.enabled = false``: appends store events and nothing else.

The defaults are a realistic setting (buffer 6,000 tokens, 3 s per model reply, one observation per five
events). ``--model-delay 0.2 --events-per-observation 1 --buffer-tokens 1500`` is a stress setting: the
worker commits a large chunk every half second, far more often than any real model allows.

Prints JSON: p50/p90/p99/mean per arm in milliseconds, the ratios, and how much observation work ran
during the measurement (jobs queued, cycles committed).

    python benchmarks/pipeline_append.py --appends 3000
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from obsmem.app import Obsmem
from obsmem.settings import load_settings

ROOT = Path(__file__).resolve().parent.parent
WORDS = [
    "fix",
    "the",
    "login",
    "test",
    "in",
    "src/auth/session.py:142",
    "then",
    "rerun",
    "pytest",
    "with",
    "the",
    "retry",
    "policy",
]


def start_model_server(workdir: Path, delay: float, group: int) -> tuple[subprocess.Popen[bytes], str]:
    port_file = workdir / "model.port"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests" / "support" / "scripted_chat.py"),
            str(port_file),
            str(delay),
            "0",
            str(group),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while not port_file.exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("the scripted model server did not start")
        time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port_file.read_text().strip()}/v1"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def summary(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {
        "p50_ms": round(percentile(ms, 0.50), 3),
        "p90_ms": round(percentile(ms, 0.90), 3),
        "p99_ms": round(percentile(ms, 0.99), 3),
        "mean_ms": round(statistics.fmean(ms), 3),
        "max_ms": round(max(ms), 3),
    }


def measure(args: argparse.Namespace, seed: int) -> dict[str, object]:
    """One run: fresh data directories for both arms, appends alternating in a random order."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="obsmem-bench-") as tmp:
        workdir = Path(tmp)
        server, base_url = start_model_server(workdir, args.model_delay, args.events_per_observation)
        try:
            on = Obsmem(
                load_settings(
                    data_dir=workdir / "on",
                    model={"base_url": base_url, "model_id": "scripted", "max_retries": 0},
                    observer={"buffer_tokens": args.buffer_tokens},
                    jobs={"poll_seconds": 0.05},
                )
            )
            off = Obsmem(load_settings(data_dir=workdir / "off", observer={"enabled": False}))
            arms = {"on": on, "off": off}
            timings: dict[str, list[float]] = {"on": [], "off": []}

            def append(name: str, n: int, record: bool) -> None:
                content = f"turn {n}: " + " ".join(rng.choice(WORDS) for _ in range(args.event_words))
                event = {"role": rng.choice(["user", "assistant"]), "content": content}
                started = time.perf_counter()
                arms[name].append_events("bench", f"s{n % args.sessions}", [event])
                if record:
                    timings[name].append(time.perf_counter() - started)

            for n in range(100):  # warm-up: create databases, fill caches
                append("on", n, False)
                append("off", n, False)
            if not args.no_workers:
                on.start_workers()
            time.sleep(0.5)
            started = time.monotonic()
            for n in range(100, 100 + args.appends):
                order = ["on", "off"] if rng.random() < 0.5 else ["off", "on"]
                for name in order:
                    append(name, n, True)
            elapsed = time.monotonic() - started
            db = on.database("bench")
            cycles = db.query("SELECT count(*) FROM om_events WHERE type = 'om_observation_end'")[0][0]
            jobs = db.query("SELECT count(*) FROM jobs")[0][0]
            on.stop_workers(timeout=2 * args.model_delay + 5)
            on.close()
            off.close()
        finally:
            server.kill()
            server.wait()
    run: dict[str, object] = {
        "seconds": round(elapsed, 1),
        "observation_during_run": {"jobs_queued": jobs, "cycles_committed": cycles},
        "on": summary(timings["on"]),
        "off": summary(timings["off"]),
    }
    run["p99_ratio_on_over_off"] = round(summary(timings["on"])["p99_ms"] / summary(timings["off"])["p99_ms"], 3)
    run["p50_ratio_on_over_off"] = round(summary(timings["on"])["p50_ms"] / summary(timings["off"])["p50_ms"], 3)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--appends", type=int, default=3000, help="appends per arm and run")
    parser.add_argument("--repeat", type=int, default=3, help="runs; the ratios' medians are reported")
    parser.add_argument("--event-words", type=int, default=60, help="words per appended event")
    parser.add_argument("--buffer-tokens", type=int, default=6000, help="observer.buffer_tokens of the 'on' arm")
    parser.add_argument("--model-delay", type=float, default=3.0, help="seconds per scripted model reply")
    parser.add_argument(
        "--events-per-observation", type=int, default=5, help="the scripted Observer's density (1 = one per event)"
    )
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument(
        "--no-workers", action="store_true", help="diagnosis: observation due (jobs queued) but no worker running"
    )
    args = parser.parse_args()
    runs = [measure(args, args.seed + index) for index in range(args.repeat)]
    result = {
        "benchmark": "pipeline_append",
        "appends_per_arm_per_run": args.appends,
        "event_words": args.event_words,
        "buffer_tokens": args.buffer_tokens,
        "model_delay_s": args.model_delay,
        "events_per_observation": args.events_per_observation,
        "workers": not args.no_workers,
        "median_p99_ratio_on_over_off": statistics.median(r["p99_ratio_on_over_off"] for r in runs),  # type: ignore[misc]
        "median_p50_ratio_on_over_off": statistics.median(r["p50_ratio_on_over_off"] for r in runs),  # type: ignore[misc]
        "runs": runs,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
