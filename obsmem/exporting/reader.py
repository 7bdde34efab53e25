"""Reading a project export: header checks, records in order, and the trailer that proves the file whole.

The reader trusts nothing it has not checked: the header must name the format and a version this obsmem
reads, every record must be of a kind the header lists, in the kinds' order, with exactly the columns the
header lists, and the file must end with a trailer whose counts and SHA-256 match what was read. Messages
name line numbers and kinds, never values from the file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import orjson

from obsmem.errors import ExportChecksumMismatch, ExportInvalid, ExportTruncated, ExportVersionUnsupported
from obsmem.exporting.format import END_KIND, FORMAT, FORMAT_VERSION
from obsmem.exporting.kinds import KIND_INDEX, KINDS, RecordKind
from obsmem.exporting.rows import decode_row

_KINDS_BY_NAME = {kind.name: kind for kind in KINDS}


@dataclass(frozen=True)
class ExportHeader:
    version: int
    project: str | None
    created_at: str | None
    columns: dict[str, frozenset[str]]  # record kind -> the columns each of its rows carries


@dataclass(frozen=True)
class Record:
    """One row as SQLite will store it (blobs decoded), with the file line it came from."""

    line: int
    kind: RecordKind
    row: dict[str, Any]


class ExportReader:
    """One pass over an export file (binary): :attr:`header` at once, then :meth:`records`, which raises at
    the end unless the trailer proves every record was read as written."""

    def __init__(self, handle: IO[bytes]) -> None:
        self._handle = handle
        self._digest = hashlib.sha256()
        self._line = 0
        self.counts: dict[str, int] = {}
        first = handle.readline()
        if not first:
            raise ExportTruncated("the export file is empty")
        self.header = self._read_header(first)
        self.counts = dict.fromkeys(self.header.columns, 0)

    def _parse(self, raw: bytes) -> dict[str, Any]:
        self._line += 1
        if not raw.endswith(b"\n"):
            raise ExportTruncated(f"line {self._line} is cut off: the export file was cut short")
        try:
            document = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise ExportInvalid(f"line {self._line} of the export file is not a JSON document") from None
        if not isinstance(document, dict):
            raise ExportInvalid(f"line {self._line} of the export file is not a JSON object")
        return document

    def _read_header(self, raw: bytes) -> ExportHeader:
        document = self._parse(raw)
        if document.get("format") != FORMAT:
            raise ExportInvalid(f"the file is not an obsmem project export: its first line is not a {FORMAT} header")
        version = document.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ExportInvalid("the export header's version is not a positive integer")
        if version > FORMAT_VERSION:
            raise ExportVersionUnsupported(
                f"the file is in export format version {version}; this obsmem reads versions up to "
                f"{FORMAT_VERSION}: upgrade obsmem to restore it"
            )
        self._digest.update(raw)
        project, created_at = document.get("project"), document.get("created_at")
        return ExportHeader(
            version=version,
            project=project if isinstance(project, str) else None,
            created_at=created_at if isinstance(created_at, str) else None,
            columns=_header_tables(document.get("tables")),
        )

    def records(self) -> Iterator[Record]:
        position = -1
        for raw in self._handle:
            document = self._parse(raw)
            name = document.get("kind")
            if name == END_KIND:
                self._check_trailer(document)
                self._check_nothing_follows()
                return
            self._digest.update(raw)
            kind = _KINDS_BY_NAME.get(name) if isinstance(name, str) else None
            if kind is None or kind.name not in self.header.columns:
                raise ExportInvalid(f"line {self._line}: a record of a kind the export header does not list")
            if KIND_INDEX[kind.name] < position:
                raise ExportInvalid(f"line {self._line}: a {kind.name} record after records of a later kind")
            position = KIND_INDEX[kind.name]
            row = document.get("row")
            if set(document) != {"kind", "row"} or not isinstance(row, dict):
                raise ExportInvalid(f'line {self._line}: a record must be {{"kind", "row"}} with an object row')
            if set(row) != self.header.columns[kind.name]:
                raise ExportInvalid(f"line {self._line}: a {kind.name} row without the columns the header lists")
            self.counts[kind.name] += 1
            yield Record(self._line, kind, decode_row(row, self._line))
        raise ExportTruncated(f"the export file ends after line {self._line} without its trailer: it was cut short")

    def _check_trailer(self, trailer: dict[str, Any]) -> None:
        if trailer.get("sha256") != self._digest.hexdigest():
            raise ExportChecksumMismatch(
                "the export file's records do not match the checksum in its trailer: the file was altered or damaged"
            )
        if trailer.get("counts") != self.counts or trailer.get("records") != sum(self.counts.values()):
            raise ExportInvalid("the record counts in the export file's trailer do not match its records")

    def _check_nothing_follows(self) -> None:
        for raw in self._handle:
            self._line += 1
            if raw.strip():
                raise ExportInvalid(f"line {self._line}: data after the export file's trailer")


def _header_tables(tables: object) -> dict[str, frozenset[str]]:
    if not isinstance(tables, list):
        raise ExportInvalid("the export header's tables are not a list")
    columns: dict[str, frozenset[str]] = {}
    for entry in tables:
        if not isinstance(entry, dict):
            raise ExportInvalid("an entry of the export header's tables is not an object")
        name = entry.get("kind")
        kind = _KINDS_BY_NAME.get(name) if isinstance(name, str) else None
        if kind is None:
            raise ExportInvalid(
                "the export header lists a record kind this obsmem does not know; restoring would lose it"
            )
        names = entry.get("columns")
        if entry.get("table") != kind.table or kind.name in columns:
            raise ExportInvalid(f"the export header's entry for {kind.name} records is not the one expected")
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise ExportInvalid(f"the export header's columns of {kind.name} records are not a list of names")
        columns[kind.name] = frozenset(names)
    return columns
