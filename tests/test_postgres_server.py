"""The tests' PostgreSQL server: it starts, holds the extensions the backend needs, and gives each test
its own database."""

from __future__ import annotations

import pytest

psycopg = pytest.importorskip("psycopg")


def test_server_has_the_extensions_and_a_fresh_database_per_test(postgres_dsn: str) -> None:
    with psycopg.connect(postgres_dsn) as conn:
        installed = {row[0] for row in conn.execute("SELECT extname FROM pg_extension")}
        assert {"pg_trgm", "vector", "btree_gist"} <= installed
        version = conn.execute("SHOW server_version_num").fetchone()
        assert version is not None and int(version[0]) >= 160000
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
        )
        assert tables.fetchone() == (0,)
        conn.execute("CREATE TABLE left_behind (x int)")


def test_a_second_test_does_not_see_the_first_ones_tables(postgres_dsn: str) -> None:
    with psycopg.connect(postgres_dsn) as conn:
        assert conn.execute("SELECT to_regclass('left_behind')").fetchone() == (None,)
