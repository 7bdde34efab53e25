"""Peak memory of a restore: what the restore keeps per record while it checks a large export.

    python benchmarks/restore_memory.py [--events 100000] [--observations 50000] [--reflections 5000]

Builds a project of realistic events (``export_restore.py``'s), observations citing them and reflections
each supported by a few observations, exports it, then restores the file into a new project twice, each
time in a fresh Python process so that building the project does not count: once for the peak resident
set (VmHWM of /proc/self/status: the interpreter, SQLite's page cache and the database pages
SQLite reads through mmap, also sampled apart as anonymous and file-backed memory) and once under
``tracemalloc`` for the peak of Python's own allocations, which is what the restore holds from record to
record (the write rules' pending checks). Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import line  # noqa: E402
from export_restore import Service, build  # noqa: E402

from obsmem.exporting import export_project, restore_project  # noqa: E402
from obsmem.memories import ReflectionIn, add_reflection  # noqa: E402


def add_reflections(service: Service, count: int, batch: int = 500) -> None:
    db = service.projects.get("original")
    rng = random.Random(12)
    with db.read() as conn:
        observations = conn.execute("SELECT memory_id, session_id FROM memories WHERE kind = 'observation'").fetchall()
    by_session: dict[str, list[str]] = {}
    for memory_id, session in observations:
        by_session.setdefault(session, []).append(memory_id)
    sessions = sorted(by_session)
    for start in range(0, count, batch):
        with db.write() as conn:
            for index in range(start, min(count, start + batch)):
                session = sessions[index % len(sessions)]
                supports = tuple(rng.sample(by_session[session], 3))
                stamp = f"2026-{1 + index % 12:02d}-{1 + index % 28:02d} {index % 24:02d}:{index % 60:02d}"
                add_reflection(conn, ReflectionIn(session, line(rng, index), supports, stamp))


class RssSampler(threading.Thread):
    """The peak of the process's anonymous memory (its heap: Python objects, SQLite's page cache) and of its
    file-backed memory (pages of the database SQLite reads through mmap), sampled every 20 ms from
    /proc/self/status (Linux): ru_maxrss counts both together."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peaks = {"RssAnon": 0, "RssFile": 0}
        self.done = threading.Event()

    def run(self) -> None:
        status = Path("/proc/self/status")
        while not self.done.wait(0.02) and status.exists():
            for entry in status.read_text().splitlines():
                name, _, value = entry.partition(":")
                if name in self.peaks:
                    self.peaks[name] = max(self.peaks[name], int(value.split()[0]))


def peak_rss_kb() -> int:
    """The process's peak resident set: /proc's VmHWM, which starts anew at exec. (``ru_maxrss`` does not
    on Linux: a child started from the process that built the project reports that process's peak.)"""
    status = Path("/proc/self/status")
    if status.exists():
        for entry in status.read_text().splitlines():
            if entry.startswith("VmHWM:"):
                return int(entry.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def restore_once(data_dir: Path, export_file: Path, project: str, traced: bool) -> dict[str, float]:
    """One restore in this process (run as a child): its seconds and peak memory."""
    service = Service(data_dir)
    sampler = RssSampler()
    sampler.start()
    if traced:
        tracemalloc.start()
    started = time.perf_counter()
    restore_project(service, export_file, project)  # type: ignore[arg-type]
    seconds = time.perf_counter() - started
    sampler.done.set()
    sampler.join()
    result = {"seconds": round(seconds, 2), "peak_rss_mb": round(peak_rss_kb() / 1024, 1)}
    result["peak_rss_anon_mb"] = round(sampler.peaks["RssAnon"] / 1024, 1)
    result["peak_rss_file_mb"] = round(sampler.peaks["RssFile"] / 1024, 1)
    if traced:
        result["tracemalloc_peak_mb"] = round(tracemalloc.get_traced_memory()[1] / 2**20, 1)
        tracemalloc.stop()
    service.projects.close()
    return result


def child(data_dir: Path, export_file: Path, project: str, traced: bool) -> dict[str, float]:
    command = [sys.executable, __file__, "--child", str(data_dir), str(export_file), project]
    if traced:
        command.append("--traced")
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--observations", type=int, default=50_000)
    parser.add_argument("--reflections", type=int, default=5_000)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--child", nargs=3, metavar=("DATA_DIR", "FILE", "PROJECT"), help=argparse.SUPPRESS)
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        data_dir, export_file, project = args.child
        print(json.dumps(restore_once(Path(data_dir), Path(export_file), project, args.traced)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        service = Service(data_dir)
        build(service, args.events, args.observations, args.sessions)
        add_reflections(service, args.reflections)
        export_file = Path(tmp) / "original.jsonl"
        with export_file.open("wb") as out:
            exported = export_project(service, "original", out)  # type: ignore[arg-type]
        service.projects.close()
        untraced = child(data_dir, export_file, "copy", traced=False)
        traced = child(data_dir, export_file, "copy2", traced=True)
        size = export_file.stat().st_size
    print(
        json.dumps(
            {
                "records": exported.records,
                "counts": {kind: count for kind, count in exported.counts.items() if count},
                "file_mb": round(size / 1e6, 1),
                "restore_seconds": untraced["seconds"],
                "peak_rss_mb": untraced["peak_rss_mb"],
                "peak_rss_anon_mb": untraced["peak_rss_anon_mb"],
                "peak_rss_file_mb": untraced["peak_rss_file_mb"],
                "tracemalloc_peak_mb": traced["tracemalloc_peak_mb"],
                "traced_restore_seconds": traced["seconds"],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
