"""Moving one project between two services (a SQLite data directory and a PostgreSQL database), verified.

:func:`migrate_project` copies a project through the export format (``obsmem.exporting``): the source is
exported in one read snapshot to a scratch file, the file is checked whole and restored into the target in
one transaction, then the copy is checked against the source:

- **records**: the target is exported too, and every record kind (sessions, events, observations and their
  citations, reflections and their supports, generations and drops, coverage, the event log, notes,
  judgments, the trust ledger, the import watermarks and record ids) must hold the same rows, byte for byte,
  with the same ids, in the same order (the first differing id is named);
- **searches**: exact searches of a sample of needles taken from the project's own memories, events and
  notes (every scope, candidates included) must return the same hits in the same order on both sides;
- **projection**: each session's rendered memory must be the same on both services.

Jobs are not copied: the queue is runtime work, and the target's housekeeping queues what the project needs.
A project that holds data in the target is refused (``project_not_empty``) unless ``replace`` is given. The
source is exported and the file checked before the target is touched; the restore then commits whole or not
at all, and with ``replace`` the old target goes in the same step (PostgreSQL: one transaction; SQLite: a
copy built beside it and swapped in by rename). So an interrupted or failed migration leaves the target
project as it was, absent or empty, never half filled: running it again carries on.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from obsmem.errors import NotOnPostgres, ProjectNotEmpty, ProjectNotFound
from obsmem.exporting import Progress, export_project, restore_project
from obsmem.exporting.restore import holds_data as restore_holds_data
from obsmem.validation import project_name

NEEDLES = 24  # exact searches compared after a copy (a third each from memories, events and notes)
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_-]{4,}")


@dataclass
class MigrationReport:
    """What a migration copied and what the comparison found (``mismatches`` empty: the copy is verified)."""

    project: str
    target_project: str
    source: str  # "sqlite" or "postgres"
    target: str
    counts: dict[str, int] = field(default_factory=dict)
    records: int = 0
    seconds: float = 0.0
    checks: dict[str, str] = field(default_factory=dict)
    mismatches: list[str] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        return not self.mismatches

    def to_dict(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "target_project": self.target_project,
            "source": self.source,
            "target": self.target,
            "records": self.records,
            "counts": dict(self.counts),
            "seconds": round(self.seconds, 3),
            "checks": dict(self.checks),
            "mismatches": list(self.mismatches),
            "verified": self.verified,
        }


def backend_of(service: Any) -> str:
    return "postgres" if getattr(service, "store", None) is not None else "sqlite"


def holds_data(service: Any, project: str) -> bool:
    """Whether ``project`` exists in ``service`` with any record a restore would refuse to write over (the
    restore's own check, so ``--replace`` is asked for exactly when it is needed)."""
    if not service.projects.exists(project):
        return False
    with service.projects.get(project).read() as conn:
        return restore_holds_data(conn)


def migrate_project(
    source: Any,
    target: Any,
    project: str,
    *,
    target_project: str | None = None,
    replace: bool = False,
    progress: Progress | None = None,
    scratch_dir: Path | None = None,
) -> MigrationReport:
    """Copy ``project`` from the ``source`` service to ``target`` (as ``target_project``) and compare.

    Raises ``project_not_found`` for an unknown source project and ``project_not_empty`` for a target
    holding data without ``replace``; with it, the target project is replaced only once the copy is
    written whole (see :func:`~obsmem.exporting.restore_project`), so a copy that fails leaves it as it
    was. A copy that differs is reported in the returned report's ``mismatches``, never raised, so the
    caller can show every difference."""
    name = project_name(project)
    copy_name = project_name(target_project or name)
    if not source.projects.exists(name):
        raise ProjectNotFound(f"project '{name}' does not exist in the source", field="project")
    replacing = holds_data(target, copy_name)
    if replacing and not replace:
        raise ProjectNotEmpty(
            f"project '{copy_name}' already holds data in the target; pass --replace to overwrite it",
            field="project",
        )
    report = MigrationReport(name, copy_name, backend_of(source), backend_of(target))
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="obsmem-migrate-", dir=scratch_dir) as scratch:
        source_file, target_file = Path(scratch) / "source.jsonl", Path(scratch) / "target.jsonl"
        with source_file.open("wb") as out:
            exported = export_project(source, name, out, progress=progress)
        restored = restore_project(target, source_file, copy_name, progress=progress, replace=replacing)
        report.counts, report.records = dict(restored.counts), restored.records
        with target_file.open("wb") as out:
            export_project(target, copy_name, out, progress=_renamed(progress, "compare"))
        report.mismatches += compare_exports(source_file, target_file)
        report.checks["records"] = (
            f"{exported.records} records compared by kind, id and content" if not report.mismatches else "differ"
        )
    needles = sample_needles(source, name)
    found = compare_searches(source, target, name, copy_name, needles)
    report.mismatches += found
    report.checks["searches"] = f"{len(needles)} exact searches compared" if not found else "differ"
    report.checks["projection"] = compare_projections(source, target, name, copy_name, report.mismatches)
    report.seconds = time.monotonic() - started
    return report


def _renamed(progress: Progress | None, phase: str) -> Progress | None:
    if progress is None:
        return None
    return lambda _, done, total: progress(phase, done, total)


def _kind_digests(path: Path) -> tuple[dict[str, int], dict[str, str], dict[str, list[bytes]]]:
    """Per record kind: the count, a SHA-256 of its rows in file order, and the rows (for naming the first
    difference). The header (creation time, schema version of the backend) and trailer are left out."""
    counts: dict[str, int] = {}
    digests: dict[str, Any] = {}
    rows: dict[str, list[bytes]] = {}
    with path.open("rb") as handle:
        handle.readline()  # the header
        for line in handle:
            record = orjson.loads(line)
            kind = record["kind"]
            if kind == "end":
                break
            counts[kind] = counts.get(kind, 0) + 1
            digests.setdefault(kind, hashlib.sha256()).update(line)
            rows.setdefault(kind, []).append(line)
    return counts, {kind: digest.hexdigest() for kind, digest in digests.items()}, rows


def compare_exports(source_file: Path, target_file: Path) -> list[str]:
    """Differences between two exports of one project, kind by kind (empty: the same records)."""
    source_counts, source_digests, source_rows = _kind_digests(source_file)
    target_counts, target_digests, target_rows = _kind_digests(target_file)
    problems = []
    for kind in dict.fromkeys([*source_counts, *target_counts]):
        if source_digests.get(kind) == target_digests.get(kind):
            continue
        have, want = target_counts.get(kind, 0), source_counts.get(kind, 0)
        if have != want:
            problems.append(f"{kind}: {want} records in the source, {have} in the target")
            continue
        for position, (ours, theirs) in enumerate(zip(source_rows[kind], target_rows[kind], strict=True)):
            if ours != theirs:
                problems.append(f"{kind}: record {position + 1} differs ({_row_id(orjson.loads(ours)['row'])})")
                break
    return problems


def _row_id(row: dict[str, Any]) -> str:
    """The id a person can look for, never the row's text."""
    for key in ("memory_id", "note_id", "judgment_id", "record_id", "generation_id", "id", "seq", "session_id"):
        if key in row:
            return f"{key} {row[key]}"
    return "no id column"


def sample_needles(service: Any, project: str, count: int = NEEDLES) -> list[str]:
    """Words taken evenly from the project's memories, events and notes (deterministic for one project)."""
    found: list[str] = []
    with service.projects.get(project).read() as conn:
        from obsmem.exporting.kinds import project_tables

        present = project_tables(conn)
        for table in ("memories", "events", "notes"):
            if table not in present:
                continue
            total = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            step = max(1, total // max(1, count // 3))
            texts = conn.execute(f"SELECT content FROM {table} WHERE id % ? = 0 ORDER BY id LIMIT ?", (step, count))
            picked = 0
            for number, (text,) in enumerate(texts):
                words = _WORD.findall(text)
                if words:
                    # A different position in each text: corpora that repeat their phrasing still give
                    # different needles.
                    found.append(words[number % len(words)])
                    picked += 1
                if picked >= count // 3:
                    break
    return list(dict.fromkeys(found))


def compare_searches(source: Any, target: Any, project: str, copy: str, needles: list[str]) -> list[str]:
    """Needles whose exact search answers differently in the copy (hit ids, order, ``truncated``)."""
    problems = []
    for number, needle in enumerate(needles, start=1):
        for scope in ("memories", "all"):
            ask = {"mode": "exact", "scope": scope, "limit": 50, "trust": "all", "user": None}
            ours = [hit.to_dict()["id"] for hit in source.search(project, needle, **ask).hits]
            theirs = [hit.to_dict()["id"] for hit in target.search(copy, needle, **ask).hits]
            if ours != theirs:
                # The needle is the project's own text: its number in the sample is named, never the word.
                problems.append(f"exact search of sample needle {number} (scope {scope}) returns different hits")
    return problems


def compare_projections(source: Any, target: Any, project: str, copy: str, problems: list[str]) -> str:
    """Each session's rendered memory on both sides, when both render one; what was checked."""
    with source.projects.get(project).read() as conn:
        sessions = [row[0] for row in conn.execute("SELECT session_id FROM sessions ORDER BY session_id")]
    try:
        before = {session: source.memory(project, session, user=None).to_dict() for session in sessions}
        after = {session: target.memory(copy, session, user=None).to_dict() for session in sessions}
    except NotOnPostgres:
        return "not rendered on PostgreSQL yet: the rows it is rendered from were compared"
    differing = [session for session in sessions if before[session] != after[session]]
    problems += [f"the projection of session {session} differs" for session in differing]
    return f"{len(sessions)} sessions compared" if not differing else "differ"
