"""Recall and forget latency while events wait for the conversation index, against a current index.

    python benchmarks/conversation_recall.py --events 200000 --repeat 5 --out bench-out

Prints one JSON document. The corpus is ``conversation_exact.py``'s (``benchmarks/corpus.py``'s lines
stored as events, bulk-inserted unindexed, as an import leaves them) plus one observation citing an
event. Measured through ``Obsmem`` first with every event above the index's watermark, then after the
catch-up (``obsmem.events.index_event_trigrams``) has indexed them all: the median and p95 of recalling
the observation by its display id, of forgetting an observation (one written for each run), of
recalling an event by its display id, and of an unknown id (the error path). Corpora are cached under
``--out``; the cached copy is indexed by the second half, so the first half builds a fresh one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conversation_exact import build  # noqa: E402
from exact_search import summary  # noqa: E402

from obsmem.app import Obsmem  # noqa: E402
from obsmem.errors import NotFound  # noqa: E402
from obsmem.events import index_event_trigrams  # noqa: E402
from obsmem.ids import event_id  # noqa: E402
from obsmem.projects import ProjectRegistry  # noqa: E402


def timed(fn, repeat: int) -> list[float]:  # type: ignore[no-untyped-def]
    fn()  # warm-up
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def measure(service: Obsmem, project: str, repeat: int) -> dict[str, object]:
    db = service.database(project)
    session, seq = db.query("SELECT session_id, seq FROM events ORDER BY id DESC LIMIT 1")[0]
    written = service.add_observations(
        project,
        [{"session_id": session, "content": "recalled note", "timestamp": "2026-01-01 10:00", "source_refs": [seq]}],
    )
    memory = (written.added + written.duplicates)[0].memory_id[:12]
    notes = iter(range(10**6))

    def forget_one() -> None:
        receipt = service.add_observations(
            project,
            [
                {
                    "session_id": session,
                    "content": f"note {next(notes)}",
                    "timestamp": "2026-01-01 10:00",
                    "source_refs": [seq],
                }
            ],
        )
        service.forget(project, receipt.added[0].memory_id[:12])

    def unknown() -> None:
        with contextlib.suppress(NotFound):
            service.recall(project, "0" * 12)

    unindexed = db.query("SELECT count(*) FROM events WHERE id > (SELECT indexed_through FROM event_trigram_progress)")[
        0
    ][0]
    return {
        "unindexed_events": unindexed,
        "recall_memory": summary(timed(lambda: service.recall(project, memory), repeat)),
        "forget_memory": summary(timed(forget_one, repeat)),
        "recall_event": summary(timed(lambda: service.recall(project, event_id(session, seq)[:12]), repeat)),
        "unknown_id": summary(timed(unknown, repeat)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    args = parser.parse_args()
    name = f"bench-recall-{args.events}"
    registry = ProjectRegistry(args.out)
    if registry.exists(name):
        registry.close()
        shutil.rmtree(args.out / "projects" / name)
        registry = ProjectRegistry(args.out)
    started = time.perf_counter()
    build(registry, name, args.events)
    load_s = time.perf_counter() - started
    registry.close()
    runs = []
    with Obsmem(data_dir=args.out) as service:
        runs.append(measure(service, name, args.repeat))
        started = time.perf_counter()
        index_event_trigrams(service.database(name))
        index_s = time.perf_counter() - started
        runs.append(measure(service, name, args.repeat))
    report = {
        "benchmark": "conversation_recall",
        "events": args.events,
        "load_s": round(load_s, 1),
        "index_s": round(index_s, 1),
        "runs": runs,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
