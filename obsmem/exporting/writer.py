"""Writing a project export: one read snapshot, streamed line by line, checksummed as it goes."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any

import apsw
import orjson

from obsmem.errors import ExportIncomplete
from obsmem.exporting import postgres
from obsmem.exporting.format import END_KIND, FORMAT, FORMAT_VERSION, PROGRESS_EVERY, Progress, ProjectService
from obsmem.exporting.kinds import KINDS, RecordKind, exportable_tables, unclassified_tables
from obsmem.exporting.rows import SEQUENCE_TABLE, encode_value, order_clause, quoted, table_columns
from obsmem.storage import ProjectDatabase
from obsmem.validation import project_name
from obsmem.version import __version__


@dataclass(frozen=True)
class ExportReceipt:
    """What an export wrote: records per kind, in all, and the checksum its trailer carries."""

    project: str
    counts: dict[str, int]
    records: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"project": self.project, "counts": dict(self.counts), "records": self.records, "sha256": self.sha256}


class _LineSink:
    """JSON lines to a binary or text stream, hashing the bytes of every line it is told to."""

    def __init__(self, out: IO[bytes] | IO[str]) -> None:
        self._out = out
        self._text = isinstance(out, io.TextIOBase)
        self._digest = hashlib.sha256()

    def write(self, document: dict[str, Any], *, hashed: bool = True) -> None:
        line = orjson.dumps(document, option=orjson.OPT_APPEND_NEWLINE)
        if hashed:
            self._digest.update(line)
        self._out.write(line.decode("utf-8") if self._text else line)  # type: ignore[arg-type]

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


def export_project(
    source: ProjectService | ProjectDatabase,
    project: str,
    out: IO[bytes] | IO[str],
    *,
    progress: Progress | None = None,
) -> ExportReceipt:
    """Write every canonical row of ``project`` to ``out`` (see docs/export-format.md).

    ``source`` is the service (``Obsmem``) or the project's database. Everything is read in one snapshot,
    so writes that land meanwhile are either wholly in the file or not at all. An unknown project is
    ``project_not_found``; a database holding a table no export rule covers is refused before anything is
    written (``export_unknown_table``).
    """
    project_name(project)
    db = source if isinstance(source, ProjectDatabase) else source.projects.get(project)
    with db.read() as conn:
        missing = unclassified_tables(conn)
        if missing:
            raise ExportIncomplete(
                f"the database holds table(s) {', '.join(missing)} that no export rule covers; exporting would "
                "lose them, so nothing was written"
            )
        present = exportable_tables(conn)
        lacking = sorted({kind.table for kind in KINDS if not kind.optional and kind.table not in present})
        if lacking:
            # A schema change renamed or dropped a table the export rules still name: fix the rules first.
            raise ExportIncomplete(f"the database lacks table(s) {', '.join(lacking)} that the export rules name")
        kinds = [kind for kind in KINDS if kind.table in present]
        columns = {kind.name: _columns(conn, kind) for kind in kinds}
        counts = {kind.name: _count(conn, kind) for kind in kinds}
        total = sum(counts.values())
        sink = _LineSink(out)
        sink.write(_header(conn, project, kinds, columns))
        written = 0
        for kind in kinds:
            for row in _rows(conn, kind, columns[kind.name]):
                sink.write({"kind": kind.name, "row": row})
                written += 1
                if progress is not None and written % PROGRESS_EVERY == 0:
                    progress("export", written, total)
        checksum = sink.hexdigest()
        sink.write({"kind": END_KIND, "counts": counts, "records": written, "sha256": checksum}, hashed=False)
    if progress is not None:
        progress("export", written, total)
    return ExportReceipt(project=project, counts=counts, records=written, sha256=checksum)


def _header(
    conn: apsw.Connection, project: str, kinds: list[RecordKind], columns: dict[str, list[str]]
) -> dict[str, Any]:
    schema = conn.execute("SELECT max(version) FROM schema_migrations").fetchall()[0][0]
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "project": project,
        "obsmem": __version__,
        "schema": schema,
        "created_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "tables": [{"kind": kind.name, "table": kind.table, "columns": columns[kind.name]} for kind in kinds],
    }


def _where(kind: RecordKind) -> str:
    return f" WHERE {kind.where}" if kind.where else ""


def _columns(conn: apsw.Connection, kind: RecordKind) -> list[str]:
    if kind.table == SEQUENCE_TABLE and postgres.is_postgres(conn):
        return ["name", "seq"]  # sqlite_sequence's columns, which the identity sequences stand for
    return table_columns(conn, kind.table)


def _rows(conn: apsw.Connection, kind: RecordKind, names: list[str]) -> Iterator[dict[str, Any]]:
    """The kind's rows as the file holds them, in the file's order."""
    if kind.table == SEQUENCE_TABLE and postgres.is_postgres(conn):
        for name, seq in postgres.sequence_rows(conn):
            yield {"name": name, "seq": seq}
    else:
        for values in conn.execute(_select(conn, kind, names)):
            yield {name: encode_value(value) for name, value in zip(names, values, strict=True)}


def _count(conn: apsw.Connection, kind: RecordKind) -> int:
    if kind.table == SEQUENCE_TABLE and postgres.is_postgres(conn):
        return len(postgres.sequence_rows(conn))
    (count,) = conn.execute(f"SELECT count(*) FROM {quoted(kind.table)}{_where(kind)}").fetchall()[0]
    return int(count or 0)


def _select(conn: apsw.Connection, kind: RecordKind, names: list[str]) -> str:
    listed = ", ".join(quoted(name) for name in names)
    order = kind.order_by or order_clause(conn, kind.table)
    if kind.order_by and postgres.is_postgres(conn):
        order = postgres.byte_order(conn, kind.table, [name.strip() for name in kind.order_by.split(",")])
    return f"SELECT {listed} FROM {quoted(kind.table)}{_where(kind)} ORDER BY {order}"
