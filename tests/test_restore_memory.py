"""A restore holds no memory's text while it waits to check the memory's id.

An observation's id is made from its sources and a reflection's from its supports, records of later kinds,
so a restore checks those ids only once the records that complete them are in. It keeps a row number and a
file line per memory until then, and reads the rest back from the database a page at a time: a restore of
a large export holding every memory's text until its end grew with the file (59.6 MB of Python objects for
an 84 MB file; see docs/benchmarks.md). Peak memory is measured with tracemalloc, which counts Python's
own allocations only, so SQLite's page cache does not enter the figure.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from obsmem.events import append_events
from obsmem.exporting import export_project, restore_project
from obsmem.memories import MAX_MEMORY_CHARS, ReflectionIn, add_observations, add_reflection
from obsmem.projects import ProjectRegistry

OBSERVATIONS = 3000
TEXT_MB = OBSERVATIONS * (MAX_MEMORY_CHARS - 100) / 2**20  # about 11 MB of observation text


class Service:
    """What export and restore use of ``Obsmem``: its projects (no indexer, so no thread allocates meanwhile)."""

    def __init__(self, data_dir: Path) -> None:
        self.projects = ProjectRegistry(data_dir)
        self.indexer = None


def text(number: int) -> str:
    words = f"observation {number} notes that the build of module {number % 97} passed on runner {number % 13}"
    return (words + " ") * ((MAX_MEMORY_CHARS - 100) // (len(words) + 1))


def test_a_restore_keeps_no_memorys_text_until_its_id_is_checked(tmp_path: Path) -> None:
    service = Service(tmp_path / "data")
    try:
        db = service.projects.get("src", create=True)
        append_events(db, "s1", [{"role": "user", "content": f"step {n}"} for n in range(1, 51)])
        items = [
            {"session_id": "s1", "content": text(n), "timestamp": "2026-03-01 10:00", "source_refs": [1 + n % 50]}
            for n in range(OBSERVATIONS)
        ]
        written = add_observations(db, items)
        assert not written.rejected
        with db.write() as conn:
            for n in range(0, OBSERVATIONS, 3):
                supports = tuple(item.memory_id for item in written.added[n : n + 3])
                add_reflection(conn, ReflectionIn("s1", text(n + 1), supports, "2026-03-01 11:00"))
        export = tmp_path / "src.jsonl"
        with export.open("wb") as out:
            export_project(service, "src", out)  # type: ignore[arg-type]
        tracemalloc.start()
        try:
            restored = restore_project(service, export, "copy")  # type: ignore[arg-type]
            peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
        finally:
            tracemalloc.stop()
        assert restored.counts["observation"] == OBSERVATIONS
        assert restored.counts["reflection"] == OBSERVATIONS // 3
        # Holding every memory's text until its id was checked peaked at 13.3 MB here; a page of 500 memories
        # read back at a time, at 4.5 MB.
        assert peak_mb < 0.7 * TEXT_MB, f"peak {peak_mb:.1f} MB of Python allocations for {TEXT_MB:.1f} MB of text"
    finally:
        service.projects.close()
