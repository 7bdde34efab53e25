"""What export and restore do differently on a PostgreSQL project schema.

The format and the rows are the same on both backends (docs/export-format.md); what differs is how the
database is asked about itself and how ids continue:

- **Catalog**: the project's tables and their columns come from ``information_schema`` for the schema the
  transaction's ``search_path`` names, in declaration order (SQLite: ``PRAGMA table_xinfo``).
- **Id sequences**: PostgreSQL has no ``sqlite_sequence``. The ``id_sequence`` records (where the job and
  event-log ids continue) are read from and written to the identity sequences of ``jobs`` and
  ``om_events``; after a restore every identity sequence is moved past the largest id restored, so new
  rows never reuse an id.
- **Order**: text keys are ordered by their bytes (``COLLATE "C"``), as SQLite orders them, whatever the
  database's default collation, so both backends export a project in the same order.
"""

from __future__ import annotations

from typing import Any

from obsmem.errors import ExportInvalid

# The tables whose ids an ``id_sequence`` record carries (what ``KINDS`` selects on SQLite), in name order.
SEQUENCED_TABLES = ("jobs", "om_events")
# Tables p0006 made to keep rows of kinds this backend had no table for; every kind has a table now, so
# nothing writes them, and they are not exported.
CARRIER_TABLES = frozenset({"carried_rows", "carried_columns"})


def is_postgres(conn: Any) -> bool:
    return getattr(conn, "dialect", "sqlite") == "postgres"


def tables(conn: Any) -> set[str]:
    """The ordinary tables of the schema the transaction works in."""
    rows = conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        " AND table_type = 'BASE TABLE'"
    ).fetchall()
    return {str(name) for (name,) in rows}


def columns(conn: Any, table: str) -> list[str]:
    """The table's columns in declaration order (none: the table does not exist); generated ones left out."""
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = ? AND is_generated = 'NEVER' ORDER BY ordinal_position",
        (table,),
    ).fetchall()
    return [str(name) for (name,) in rows]


def bytea_columns(conn: Any, table: str) -> list[str]:
    """The table's columns of type ``bytea`` (the only ones a restored blob may go into)."""
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = ? AND data_type = 'bytea' ORDER BY ordinal_position",
        (table,),
    ).fetchall()
    return [str(name) for (name,) in rows]


# What each PostgreSQL data type of the schema holds, as the restore checks a value against its column.
_VALUE_TYPES = {
    "smallint": "integer",
    "integer": "integer",
    "bigint": "integer",
    "real": "real",
    "double precision": "real",
    "numeric": "real",
    "text": "text",
    "character varying": "text",
    "character": "text",
    "bytea": "blob",
}


def value_types(conn: Any, table: str) -> dict[str, str]:
    """The table's columns that hold integers, reals, text or bytes, each with which one (see
    :func:`obsmem.exporting.rows.value_types`)."""
    rows = conn.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = ?",
        (table,),
    ).fetchall()
    return {str(name): _VALUE_TYPES[str(kind)] for name, kind in rows if str(kind) in _VALUE_TYPES}


def byte_order(conn: Any, table: str, names: list[str]) -> str:
    """An ORDER BY list of ``names`` in which the table's text columns sort by their bytes (``COLLATE "C"``),
    as SQLite's do: a database whose default collation is a language's would otherwise order the text keys
    (session ids, import paths, record ids) its own way, and the same project would export in two orders."""
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = ? AND data_type IN ('text', 'character varying', 'character')",
        (table,),
    ).fetchall()
    texts = {str(name) for (name,) in rows}
    return ", ".join(f'{_quoted(name)} COLLATE "C"' if name in texts else _quoted(name) for name in names)


def primary_key(conn: Any, table: str) -> list[str]:
    """The table's primary-key columns in key order."""
    rows = conn.execute(
        "SELECT a.attname FROM pg_index AS i JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) ON true"
        " JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
        " WHERE i.indrelid = to_regclass(?) AND i.indisprimary ORDER BY k.n",
        (table,),
    ).fetchall()
    return [str(name) for (name,) in rows]


def sequence_rows(conn: Any) -> list[tuple[str, int]]:
    """``(table, last id handed out)`` for each sequenced table that has handed one out, as SQLite's
    ``sqlite_sequence`` holds them."""
    found = []
    for table in SEQUENCED_TABLES:
        (last,) = conn.execute("SELECT pg_sequence_last_value(pg_get_serial_sequence(?, 'id'))", (table,)).fetchone()
        if last is not None:
            found.append((table, int(last)))
    return found


def raise_sequence(conn: Any, table: str, seq: int, line: int) -> None:
    """Make ``table``'s ids continue after ``seq`` (never lowering where they continue)."""
    if table not in SEQUENCED_TABLES:
        raise ExportInvalid(f"line {line}: an id_sequence row names a table whose ids are not carried")
    conn.execute(
        "SELECT setval(pg_get_serial_sequence(?, 'id'),"
        " greatest(?, coalesce(pg_sequence_last_value(pg_get_serial_sequence(?, 'id')), 0)))",
        (table, seq, table),
    )


def continue_identities(conn: Any) -> None:
    """Move every identity sequence of the schema past the largest id its table holds: restored rows keep
    their ids, which an insert with explicit ids does not count."""
    rows = conn.execute(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND is_identity = 'YES'"
    ).fetchall()
    for table, column in rows:
        quoted_table, quoted_column = _quoted(table), _quoted(column)
        conn.execute(
            f"SELECT setval(pg_get_serial_sequence(?, ?), greatest(m, coalesce(pg_sequence_last_value("
            f"pg_get_serial_sequence(?, ?)), 0))) FROM (SELECT max({quoted_column}) AS m FROM {quoted_table}) AS t"
            " WHERE m IS NOT NULL",
            (table, column, table, column),
        )


def broken_rule(exc: BaseException) -> str | None:
    """The schema rule a PostgreSQL error says a row broke (a constraint's name, a type or a value out of
    range), or None when ``exc`` is no such error. Only names: PostgreSQL's message and detail quote the
    row's values, which may be memory text."""
    state = getattr(exc, "sqlstate", None)
    if not isinstance(state, str) or state[:2] not in ("22", "23") or "NUL" in str(exc):
        return None  # text holding U+0000 is refused as not_on_postgres by the connection instead
    diag = getattr(exc, "diag", None)
    constraint = getattr(diag, "constraint_name", None)
    if constraint:
        return f"constraint {constraint}"
    if state in ("23000", "23514"):
        # Raised by a trigger function of the schema (the append-only ledger, the pipeline's invariants),
        # whose messages are fixed text of the schema, never a row's values.
        message = getattr(diag, "message_primary", None)
        return f"a trigger of the schema: {message}" if message else "a trigger of the schema"
    return f"a value the column cannot hold (SQLSTATE {state})"


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
