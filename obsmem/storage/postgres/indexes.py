"""A table's indexes as the schema holds them, each as the statements that drop it and make it again.

A bulk load into a table with indexes inserts each row into each index one by one; dropping them first and
making them again after is one sort each. Read from the catalog, whatever the migrations made, so a later
migration's index is rebuilt as it is defined (the keyword rebuild, the benchmarks' copies).
"""

from __future__ import annotations

from typing import Any

# The constraints that own an index (a key, a unique or exclusion constraint) go through ALTER TABLE, any
# other index by its own definition.
_KEYS = """
SELECT format('ALTER TABLE %I DROP CONSTRAINT %I', ?::text, c.conname),
       format('ALTER TABLE %I ADD CONSTRAINT %I %s', ?::text, c.conname, pg_get_constraintdef(c.oid))
    FROM pg_constraint AS c WHERE c.conrelid = ?::regclass AND c.contype IN ('p', 'u', 'x')
"""
_OTHERS = """
SELECT format('DROP INDEX %I', i.relname), pg_get_indexdef(i.oid)
    FROM pg_index AS x JOIN pg_class AS i ON i.oid = x.indexrelid
    WHERE x.indrelid = ?::regclass
      AND NOT EXISTS (SELECT 1 FROM pg_constraint AS c WHERE c.conindid = x.indexrelid AND c.contype IN ('p', 'u', 'x'))
"""


def index_statements(conn: Any, table: str, *, keys: bool) -> list[tuple[str, str]]:
    """``(drop, make)`` for each index of ``table`` (in the connection's schema); with ``keys``, its key and
    unique constraints too (else they stay, and so do their indexes)."""
    found = [tuple(row) for row in conn.execute(_KEYS, (table, table, table))] if keys else []
    return found + [tuple(row) for row in conn.execute(_OTHERS, (table,))]  # type: ignore[misc]
