"""Rows as they travel in an export: column discovery, value encoding and the plain restore of a row.

A row is written as a JSON object of its stored columns. SQLite values map onto JSON one to one (NULL,
integer, real, text), except blobs, which no canonical table holds today: they travel as
``{"base64": "..."}``, the only JSON object a value can be, and a restore puts one only into a column
declared for bytes (``BLOB`` on SQLite, ``bytea`` on PostgreSQL), so both backends store the same thing.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import apsw

from obsmem.bounds import MAX_SEQ, is_strict_int
from obsmem.errors import ExportInvalid
from obsmem.exporting import postgres

if TYPE_CHECKING:
    from obsmem.exporting.kinds import RecordKind

BLOB_KEY = "base64"
SEQUENCE_TABLE = "sqlite_sequence"  # SQLite's record of the last id each AUTOINCREMENT table handed out


@dataclass
class RestoreState:
    """What one restore carries from record to record: its write connection (inside the restore's one
    transaction), the columns of each target table, and what a kind leaves for its ``after`` step."""

    conn: apsw.Connection
    line: int = 0  # the file line being restored, for error messages
    columns: dict[str, frozenset[str]] = field(default_factory=dict)
    statements: dict[tuple[str, tuple[str, ...]], str] = field(default_factory=dict)  # (table, columns) -> INSERT
    pending: dict[str, Any] = field(default_factory=dict)
    batch: RowBatch | None = None  # PostgreSQL: plain inserts sent together (see insert_row)
    blob_columns: dict[str, frozenset[str]] = field(default_factory=dict)  # table -> columns declared for bytes
    value_types: dict[str, dict[str, str]] = field(default_factory=dict)  # table -> column -> what it holds


# Rows of one table sent to PostgreSQL at once, with COPY: one INSERT per row made a 300,000-record restore
# spend minutes on round trips and statement overhead.
BATCH_ROWS = 5000


@dataclass
class RowBatch:
    copy: str  # the COPY ... FROM STDIN statement of the batch's table and columns
    first_line: int
    last_line: int = 0
    rows: list[tuple[Any, ...]] = field(default_factory=list)


def quoted(name: str) -> str:
    """An SQL identifier, quoted (names come from the schema, or are checked against it first)."""
    return '"' + name.replace('"', '""') + '"'


# Columns derived from the rest of the database, left out of exports: in_date_order says which events the
# date indexes hold (m0006_conversation); a restored copy's catch-up sets it anew.
DERIVED_COLUMNS = {("events", "in_date_order")}


def table_columns(conn: apsw.Connection, table: str) -> list[str]:
    """The table's stored columns in declaration order (generated and hidden columns cannot be inserted),
    derived columns left out."""
    if postgres.is_postgres(conn):
        return [name for name in postgres.columns(conn, table) if (table, name) not in DERIVED_COLUMNS]
    rows = conn.execute(f"PRAGMA main.table_xinfo({quoted(table)})").fetchall()
    return [str(name) for _, name, _, _, _, _, hidden in rows if hidden == 0 and (table, name) not in DERIVED_COLUMNS]


def order_clause(conn: apsw.Connection, table: str) -> str:
    """Primary-key order (the file is deterministic and parents come first), else rowid order."""
    if postgres.is_postgres(conn):
        return postgres.byte_order(conn, table, postgres.primary_key(conn, table)) or "ctid"
    rows = conn.execute(f"PRAGMA main.table_info({quoted(table)})").fetchall()
    keys = sorted((int(pk or 0), str(name)) for _, name, _, _, _, pk in rows if pk)
    return ", ".join(quoted(name) for _, name in keys) if keys else "rowid"


def encode_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return {BLOB_KEY: base64.b64encode(value).decode("ascii")}
    return value


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_PLAIN = frozenset({str, int, float, type(None)})  # exact types: a JSON true or false is a bool, refused


def decode_row(row: dict[str, Any], line: int) -> dict[str, Any]:
    """Every value of an exported row back into what SQLite stored (see :func:`decode_value`)."""
    decoded = {name: value if type(value) in _PLAIN else decode_value(value, line) for name, value in row.items()}
    for value in decoded.values():
        if type(value) is int and not _INT64_MIN <= value <= _INT64_MAX:
            # Past what a database integer holds: SQLite raised OverflowError out of the restore.
            raise ExportInvalid(f"line {line}: a number is outside the 64-bit integer range")
    return decoded


def decode_value(value: Any, line: int) -> Any:
    """A JSON value back into what SQLite stored; anything a writer never produces is refused."""
    if value is None or isinstance(value, (str, float)) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, dict) and set(value) == {BLOB_KEY} and isinstance(value[BLOB_KEY], str):
        try:
            return base64.b64decode(value[BLOB_KEY], validate=True)
        except binascii.Error:
            raise ExportInvalid(f"line {line}: a blob value is not valid base64") from None
    raise ExportInvalid(f"line {line}: a value is not null, a number, a string or a blob")


def insert_row(state: RestoreState, kind: RecordKind, row: dict[str, Any]) -> None:
    """Insert ``row`` (decoded values) into the kind's table as it was exported: same primary keys, so every
    id and every reference between rows stays what it was."""
    names = tuple(row)
    sql = state.statements.get((kind.table, names))
    if sql is None:
        sql = state.statements[(kind.table, names)] = _insert_statement(state, kind, names)
    send_insert(state, sql, tuple(row.values()), table=kind.table, names=names)


def send_insert(state: RestoreState, sql: str, values: tuple[Any, ...], *, table: str, names: tuple[str, ...]) -> None:
    """Insert one row of the restore: ``sql`` at once on SQLite; on PostgreSQL the row waits in a batch that
    :func:`flush_rows` copies into ``table`` (``names`` are its columns, checked against the schema)."""
    if any(isinstance(value, bytes) for value in values):
        _require_blob_columns(state, table, names, values)
    if not postgres.is_postgres(state.conn):
        state.conn.execute(sql, values)
        return
    copy = f"COPY {quoted(table)} ({', '.join(quoted(name) for name in names)}) FROM STDIN"
    if state.batch is not None and state.batch.copy != copy:
        flush_rows(state)
    if state.batch is None:
        state.batch = RowBatch(copy, state.line)
    state.batch.rows.append(values)
    state.batch.last_line = state.line
    if len(state.batch.rows) >= BATCH_ROWS:
        flush_rows(state)


def _require_blob_columns(state: RestoreState, table: str, names: tuple[str, ...], values: tuple[Any, ...]) -> None:
    """Refuse a blob (``{"base64": ...}``) bound for a column not declared for bytes: SQLite would store it
    as a blob in a text column and PostgreSQL as the text of its hex digits, so the two backends would give
    the row different meanings, and neither is what a writer of this format produces. The column is named,
    never the value."""
    blobs = state.blob_columns.get(table)
    if blobs is None:
        blobs = state.blob_columns[table] = frozenset(blob_columns(state.conn, table))
    for name, value in zip(names, values, strict=True):
        if isinstance(value, bytes) and name not in blobs:
            raise ExportInvalid(
                f"line {state.line}: column {name} of {table} holds a blob, but the column is not declared for "
                "bytes (a writer of this format never puts one there)"
            )


def blob_columns(conn: apsw.Connection, table: str) -> list[str]:
    """The table's columns declared for bytes (SQLite: a type with BLOB in it; PostgreSQL: bytea)."""
    if postgres.is_postgres(conn):
        return postgres.bytea_columns(conn, table)
    rows = conn.execute(f"PRAGMA main.table_xinfo({quoted(table)})").fetchall()
    return [str(name) for _, name, declared, *_ in rows if "BLOB" in str(declared or "").upper()]


def value_types(conn: apsw.Connection, table: str) -> dict[str, str]:
    """The table's columns that hold integers, reals, text or bytes, each with which one: on SQLite by the
    declared type's affinity (a column of no declared type holds anything and is left out), on PostgreSQL by
    the data type."""
    if postgres.is_postgres(conn):
        return postgres.value_types(conn, table)
    rows = conn.execute(f"PRAGMA main.table_xinfo({quoted(table)})").fetchall()
    return {str(name): kind for _, name, declared, *_ in rows if (kind := _affinity(str(declared or "").upper()))}


def _affinity(declared: str) -> str | None:
    """SQLite's rules for a declared type's affinity (https://sqlite.org/datatype3.html, 3.1), for the
    declared types that say what a column holds."""
    if "INT" in declared:
        return "integer"
    if any(word in declared for word in ("CHAR", "CLOB", "TEXT")):
        return "text"
    if "BLOB" in declared:
        return "blob"
    if any(word in declared for word in ("REAL", "FLOA", "DOUB")):
        return "real"
    return None


_HELD_BY = {"integer": (int,), "real": (int, float), "text": (str,), "blob": (bytes,)}
_TYPE_WORDS = {int: "an integer", float: "a fraction", str: "text", bytes: "a blob"}


def require_value_types(state: RestoreState, table: str, row: dict[str, Any]) -> None:
    """Refuse a value (decoded) of another type than its column's: SQLite keeps text in an INTEGER column
    as text and a fraction as a real, where every write stores an integer, and PostgreSQL reads digits
    given for a text column as text, so the row would mean what no write meant. NULL is the schema's
    business (NOT NULL). The column is named, never the value."""
    types = state.value_types.get(table)
    if types is None:
        types = state.value_types[table] = value_types(state.conn, table)
    for name, value in row.items():
        kind = types.get(name)
        if value is None or kind is None or type(value) in _HELD_BY[kind]:
            continue
        if kind == "blob" or isinstance(value, bytes):
            continue  # a blob where bytes do not go is refused with its own reason (_require_blob_columns)
        raise ExportInvalid(
            f"line {state.line}: column {name} of {table} holds {_TYPE_WORDS[type(value)]}, but the column holds "
            f"{kind} values (a write never stores anything else there)"
        )


def flush_rows(state: RestoreState) -> None:
    """Send the waiting batch of plain inserts (PostgreSQL); a row it refuses is reported for the batch's
    lines, since the server does not say which row of the batch it was."""
    batch, state.batch = state.batch, None
    if batch is None or not batch.rows:
        return
    state.pending["batch_lines"] = (batch.first_line, batch.last_line)
    raw = state.conn.raw  # type: ignore[attr-defined]  # a PostgresConnection's psycopg connection
    with raw.cursor().copy(batch.copy) as copy:
        for row in batch.rows:
            copy.write_row(row)
    state.pending.pop("batch_lines", None)


def _insert_statement(state: RestoreState, kind: RecordKind, names: tuple[str, ...]) -> str:
    """The INSERT for these columns of the kind's table, once they are known to be the table's."""
    known = state.columns.get(kind.table)
    if known is None:
        known = state.columns[kind.table] = frozenset(table_columns(state.conn, kind.table))
    if not known:
        raise ExportInvalid(
            f"line {state.line}: {kind.name} records need a {kind.table} table, which this obsmem's databases do "
            "not have (upgrade obsmem)"
        )
    unknown = set(names) - known
    if unknown:
        raise ExportInvalid(
            f"line {state.line}: {kind.name} records carry {len(unknown)} column(s) the {kind.table} table of this "
            "obsmem does not have; restoring them would lose data (upgrade obsmem)"
        )
    return (
        f"INSERT INTO {quoted(kind.table)}({', '.join(quoted(n) for n in names)}) "
        f"VALUES ({', '.join('?' for _ in names)})"
    )


def raise_sequence(state: RestoreState, kind: RecordKind, row: dict[str, Any]) -> None:
    """Make an AUTOINCREMENT table continue after the exported id. SQLite keeps one row per table in
    ``sqlite_sequence`` (without a key), which restoring that table's rows has already made, so the row
    is raised in place rather than inserted twice."""
    name, seq = row.get("name"), row.get("seq")
    if set(row) != {"name", "seq"} or not isinstance(name, str) or not is_strict_int(seq):
        raise ExportInvalid(f"line {state.line}: an id_sequence row is not a table name and an id")
    # Only the tables an export carries, on both backends, and no further than ids go: a forged sequence
    # at 2^63-1 made every later insert into jobs fail, reported as a full disk.
    if name not in postgres.SEQUENCED_TABLES:
        raise ExportInvalid(f"line {state.line}: an id_sequence row names a table whose ids are not carried")
    if not 0 <= seq <= MAX_SEQ:
        raise ExportInvalid(f"line {state.line}: an id_sequence row's id is outside 0 to 2^53")
    if postgres.is_postgres(state.conn):
        postgres.raise_sequence(state.conn, name, seq, state.line)
        return
    raised = state.conn.execute(
        f"UPDATE {SEQUENCE_TABLE} SET seq = max(seq, ?) WHERE name = ? RETURNING 1", (seq, name)
    ).fetchall()
    if not raised:
        state.conn.execute(f"INSERT INTO {SEQUENCE_TABLE}(name, seq) VALUES (?, ?)", (name, seq))
