"""Whole-project export and restore throughput through the Python API.

    python benchmarks/export_restore.py --events 100000 --observations 20000

Builds a project of realistic events (``ingest.py``'s) and observations citing them, exports it to a
file, restores the file into a new project, and checks that the copy's rows equal the original's.
Prints JSON: records and file size, export records/s, and restore records/s (the restore's verify pass
and its write pass together, in one transaction with ``synchronous=FULL``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import line  # noqa: E402
from ingest import make_events  # noqa: E402

from obsmem.events import append_events  # noqa: E402
from obsmem.exporting import KINDS, export_project, restore_project  # noqa: E402
from obsmem.memories import add_observations  # noqa: E402
from obsmem.projects import ProjectRegistry  # noqa: E402


class Service:
    """The two things export and restore use of ``Obsmem``, without building its pipeline and searchers."""

    def __init__(self, data_dir: Path) -> None:
        self.projects = ProjectRegistry(data_dir)
        self.indexer = None


def build(service: Service, events: int, observations: int, sessions: int, batch: int = 500) -> None:
    db = service.projects.get("original", create=True)
    made = make_events(events)
    last_seq: dict[str, int] = {}
    for number, start in enumerate(range(0, len(made), batch)):
        session = f"session-{number % sessions}"
        receipt = append_events(db, session, made[start : start + batch])
        last_seq[session] = receipt.last_seq
    rng = random.Random(11)
    names = sorted(last_seq)
    for start in range(0, observations, batch):
        items = []
        for index in range(start, min(observations, start + batch)):
            session = names[index % len(names)]
            refs = sorted({rng.randint(1, last_seq[session]) for _ in range(rng.randint(1, 3))})
            stamp = f"2026-{1 + index % 12:02d}-{1 + index % 28:02d} {index % 24:02d}:{index % 60:02d}"
            items.append({"session_id": session, "content": line(rng, index), "timestamp": stamp, "source_refs": refs})
        written = add_observations(db, items)
        assert not written.rejected, written.rejected[:1]


def rows(service: Service, project: str) -> int:
    db = service.projects.get(project)
    total = 0
    for kind in KINDS:
        if kind.name != "note":
            where = f" WHERE {kind.where}" if kind.where else ""
            total += db.query(f'SELECT count(*) FROM "{kind.table}"{where}')[0][0]
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--observations", type=int, default=20_000)
    parser.add_argument("--sessions", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        service = Service(Path(tmp) / "data")
        build(service, args.events, args.observations, args.sessions)
        export_file = Path(tmp) / "original.jsonl"
        started = time.perf_counter()
        with export_file.open("wb") as out:
            exported = export_project(service, "original", out)  # type: ignore[arg-type]
        export_seconds = time.perf_counter() - started
        started = time.perf_counter()
        restored = restore_project(service, export_file, "copy")  # type: ignore[arg-type]
        restore_seconds = time.perf_counter() - started
        same = rows(service, "copy") == rows(service, "original") == exported.records == restored.records
        size = export_file.stat().st_size
        service.projects.close()
    print(
        json.dumps(
            {
                "events": args.events,
                "observations": args.observations,
                "records": exported.records,
                "file_mb": round(size / 1e6, 1),
                "export_seconds": round(export_seconds, 2),
                "export_records_per_second": round(exported.records / export_seconds),
                "restore_seconds": round(restore_seconds, 2),
                "restore_records_per_second": round(restored.records / restore_seconds),
                "rows_equal": same,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
