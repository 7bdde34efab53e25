"""Restoring a project export into a new project: verified first, then written in one transaction.

Two passes over the file. The first checks it whole (header, version, every record's shape and order,
the trailer's counts and checksum) without touching any database, so a truncated, altered or too-new
file creates nothing. The second writes every row inside one ``BEGIN IMMEDIATE`` transaction, checking
the file again as it goes (it may have changed in between): any problem rolls the whole restore back.

Rows keep their primary keys, so every id (memory ids, event seqs, row ids, generation ids, event-log
ids) is what it was and every reference between rows still holds. Derived data is not in the file: the
schema's triggers fill the trigram index and queue every restored memory for the semantic indexer as the
rows go in, and the indexer is woken once the restore commits.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import apsw

from obsmem.errors import ExportInvalid, ProjectNotEmpty
from obsmem.exporting import postgres
from obsmem.exporting.format import PROGRESS_EVERY, Progress, ProjectService
from obsmem.exporting.kinds import KIND_INDEX, KINDS, project_tables
from obsmem.exporting.reader import ExportReader
from obsmem.exporting.redacting import redacted_row
from obsmem.exporting.rows import (
    RestoreState,
    flush_rows,
    insert_row,
    quoted,
    require_value_types,
)
from obsmem.exporting.write_rules import check_row, keep_redacted_text
from obsmem.faults import crash_point
from obsmem.projects import ProjectRegistry
from obsmem.validation import project_name


@dataclass(frozen=True)
class RestoreReceipt:
    """What a restore wrote: the project, the project the file was exported from, records per kind."""

    project: str
    exported_project: str | None
    counts: dict[str, int]
    records: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "exported_project": self.exported_project,
            "counts": dict(self.counts),
            "records": self.records,
        }


def verify_export(path: Path | str, progress: Progress | None = None) -> ExportReader:
    """Read the whole file and check it (raises the ``export_*`` errors); returns the finished reader."""
    with Path(path).open("rb") as handle:
        reader = ExportReader(handle)
        for count, _ in enumerate(reader.records(), start=1):
            if progress is not None and count % PROGRESS_EVERY == 0:
                progress("verify", count, 0)
    return reader


def restore_project(
    service: ProjectService,
    path: Path | str,
    project: str,
    *,
    progress: Progress | None = None,
    replace: bool = False,
) -> RestoreReceipt:
    """Restore the export file at ``path`` into ``project``, which must be new or empty unless ``replace``.

    Refuses a project that holds data (``project_not_empty``), a file that is not an export
    (``export_invalid``), is cut short (``export_truncated``), was altered (``export_checksum_mismatch``)
    or is from a newer format (``export_version_unsupported``). On any failure nothing is restored; a
    project this call created stays, empty, and a later restore may fill it.

    ``replace`` restores over a project that holds data, whole or not at all: the file is checked first,
    then on PostgreSQL the project's schema is dropped, made again and filled in one transaction; on SQLite
    the copy is built in a directory beside the project and swapped in by rename once it is committed. Any
    failure before that leaves the old project as it was.
    """
    project = project_name(project)
    registry = service.projects
    if registry.exists(project) and not replace:
        with registry.get(project).read() as conn:
            _require_empty(conn, project)
    checked = verify_export(path, progress)
    total = sum(checked.counts.values())
    if replace and isinstance(registry, ProjectRegistry) and registry.exists(project):
        reader = _restore_beside(registry, path, project, progress, total)
    else:
        db = registry.get(project, create=True)
        with Path(path).open("rb") as handle, db.write() as conn:
            if replace and postgres.is_postgres(conn):
                registry.reset_schema(conn)  # type: ignore[attr-defined]  # a PostgresStore
            else:
                _require_empty(conn, project)
            reader = _restore_into(conn, handle, progress, total)
    if service.indexer is not None:
        service.indexer.notify(project)
    return RestoreReceipt(
        project=project,
        exported_project=reader.header.project,
        counts=dict(reader.counts),
        records=sum(reader.counts.values()),
    )


def _restore_into(conn: apsw.Connection, handle: BinaryIO, progress: Progress | None, total: int) -> ExportReader:
    """Every record of the file into the project of ``conn``'s write transaction."""
    reader = ExportReader(handle)
    _restore_records(RestoreState(conn), reader, progress, total)
    if postgres.is_postgres(conn):
        postgres.continue_identities(conn)
    crash_point("restore:written")  # every row written, nothing committed: a kill here restores nothing
    return reader


def _restore_beside(
    registry: ProjectRegistry, path: Path | str, project: str, progress: Progress | None, total: int
) -> ExportReader:
    """SQLite's ``replace``: restore into a new project database in a staging directory beside the
    projects, then swap its directory in (the old one is deleted only after the new one is in place)."""
    staging = registry.staging_area(project)
    try:
        beside = ProjectRegistry(staging)
        try:
            with Path(path).open("rb") as handle, beside.get(project, create=True).write() as conn:
                reader = _restore_into(conn, handle, progress, total)
        finally:
            beside.close()
        registry.replace_with(project, beside.directory(project))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return reader


def holds_data(conn: apsw.Connection) -> bool:
    """Whether the project of ``conn`` holds any exported row (every record kind's table is asked;
    SQLite's id sequences are bookkeeping, not data)."""
    present = project_tables(conn)
    for table in dict.fromkeys(kind.table for kind in KINDS if kind.table in present):
        if conn.execute(f"SELECT 1 FROM {quoted(table)} LIMIT 1").fetchone() is not None:
            return True
    return False


def _require_empty(conn: apsw.Connection, project: str) -> None:
    if holds_data(conn):
        raise ProjectNotEmpty(
            f"project '{project}' already holds data; a restore only fills a new or empty project",
            field="project",
        )


def _restore_records(state: RestoreState, reader: ExportReader, progress: Progress | None, total: int) -> None:
    finished = 0  # KINDS before this index have had their `after` step
    done = 0
    try:
        for record in reader.records():
            if record.kind.restore is not None or finished < KIND_INDEX[record.kind.name]:
                flush_rows(state)  # rows of earlier kinds are in before a custom step or a kind's end runs
            finished = _finish_kinds(state, finished, KIND_INDEX[record.kind.name])
            state.line = record.line
            require_value_types(state, record.kind.table, record.row)
            check_row(state, record.kind.name, record.row)  # as written: the rules of the write that made it
            row = redacted_row(record.kind.name, record.row, record.line)
            if row is not record.row:
                keep_redacted_text(state, record.kind.name, record.row)  # the ids were made from the file's text
            (record.kind.restore or insert_row)(state, record.kind, row)
            done += 1
            if progress is not None and done % PROGRESS_EVERY == 0:
                progress("restore", done, total)
        flush_rows(state)
        state.line = 0
        _finish_kinds(state, finished, len(KINDS))
    except (apsw.ConstraintError, apsw.MismatchError) as exc:
        where = f"line {state.line}" if state.line else "the end of the file"
        # SQLite names the constraint or trigger that refused the row, never the row's values.
        raise ExportInvalid(f"{where}: the export breaks a rule of the database schema ({exc})") from None
    except Exception as exc:
        rule = postgres.broken_rule(exc)
        if rule is None:
            raise
        lines = state.pending.get("batch_lines")
        where = (
            f"lines {lines[0]}-{lines[1]}" if lines else f"line {state.line}" if state.line else "the end of the file"
        )
        raise ExportInvalid(f"{where}: the export breaks a rule of the database schema ({rule})") from None
    if progress is not None:
        progress("restore", done, total)


def _finish_kinds(state: RestoreState, start: int, stop: int) -> int:
    """Run the ``after`` step of every kind from ``start`` up to (not including) ``stop``."""
    for kind in KINDS[start:stop]:
        if kind.after is not None:
            kind.after(state)
    return max(start, stop)
