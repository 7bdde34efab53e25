"""``index_statements``: a table's indexes as the statements that drop them and make them again, read from
the catalog. A bulk load drops them and makes them after (the keyword rebuild, the benchmarks' copies), so
what it makes must be what the migrations made, and without ``keys`` the table's keys must stay."""

from __future__ import annotations

from typing import Any

from obsmem.storage import index_statements
from support.postgres import PostgresTestServer, fresh_project

# The indexes a key or unique constraint owns.
_KEY_INDEXES = (
    "SELECT i.relname FROM pg_constraint AS c JOIN pg_class AS i ON i.oid = c.conindid"
    " WHERE c.conrelid = ?::regclass AND c.contype IN ('p', 'u', 'x') ORDER BY i.relname"
)
_INDEXES = (
    "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = ? AND schemaname = current_schema()"
    " ORDER BY indexname"
)


def _indexes(conn: Any, table: str) -> list[tuple[str, str]]:
    return [tuple(row) for row in conn.execute(_INDEXES, (table,))]


def test_dropped_and_made_again_as_the_migrations_made_them(postgres_server: PostgresTestServer) -> None:
    with fresh_project(postgres_server) as db, db.write() as conn:
        for table, keys in (("memories", False), ("semantic_postings", True)):
            migrated = _indexes(conn, table)
            owned = [row[0] for row in conn.execute(_KEY_INDEXES, (table,))]
            assert owned and len(migrated) > len(owned)
            statements = index_statements(conn, table, keys=keys)
            for drop, _ in statements:
                conn.execute(drop)
            assert [name for name, _ in _indexes(conn, table)] == ([] if keys else owned), table
            for _, make in statements:
                conn.execute(make)
            assert _indexes(conn, table) == migrated, table
