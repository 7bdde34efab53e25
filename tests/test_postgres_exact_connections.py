"""A transaction's first exchange with PostgreSQL carries its opening statements, and checks the pooled
connection: the pool checks none when it hands one out (that cost every search one more exchange). A
connection closed under the pool (its backend terminated, the server restarted) is replaced by the first
statement that finds it closed, and a search or a write made right after answers as if nothing happened,
the write stored once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from obsmem.dates import parse_window
from obsmem.retrieval.exact_postgres import Plan, PostgresExactSearcher
from obsmem.storage import PostgresStore
from obsmem.storage.postgres import PostgresProjectDatabase
from support.postgres import PostgresTestServer

psycopg = pytest.importorskip("psycopg")

POOL_SIZE = 3
TEXTS = ["the parser fix for #2510", "a note on retries", "moved qz to the new parser"]


@pytest.fixture
def store(postgres_dsn: str) -> Iterator[PostgresStore]:
    store = PostgresStore(postgres_dsn, pool_size=POOL_SIZE)
    yield store
    store.close()


def _fill(db: PostgresProjectDatabase) -> None:
    with db.write() as conn:
        conn.execute("INSERT INTO sessions VALUES ('s1', 'x', 'x', 0, 0)")
        for n, text in enumerate(TEXTS, start=1):
            conn.execute(
                "INSERT INTO memories(id, memory_id, kind, session_id, content, date, importance, created_at)"
                " VALUES (?, ?, 'observation', 's1', ?, ?, 'low', 'x')",
                (n, f"{n:064x}", text, f"2026-01-0{n} 10:00:00"),
            )


def _search(db: PostgresProjectDatabase, needle: str, plan: Plan | None = None) -> list[str]:
    with db.read() as conn:
        hits, _ = PostgresExactSearcher(conn, plan=plan).search(needle, parse_window(), 20)
    return [hit.content for hit in hits]


def _fill_the_pool(store: PostgresStore) -> None:
    """Every connection the pool may hold opened, all taken at once, then given back."""
    taken = [store._pool.getconn() for _ in range(POOL_SIZE)]
    for conn in taken:
        store._pool.putconn(conn)


def _terminate_others(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        ).fetchall()
    return len(rows)


def test_a_search_after_its_pooled_connections_were_terminated_answers(store: PostgresStore, postgres_dsn: str) -> None:
    db = store.get("p", create=True)
    _fill(db)
    _fill_the_pool(store)
    assert _search(db, "parser") == [TEXTS[2], TEXTS[0]]
    for plan in ("candidates", "walk", "date-walk"):  # the trigram candidates go prepared, in a pipeline
        _fill_the_pool(store)
        assert _terminate_others(postgres_dsn) >= POOL_SIZE
        for _ in range(POOL_SIZE + 1):  # every dead connection met once
            assert _search(db, "parser", plan) == [TEXTS[2], TEXTS[0]]
            assert _search(db, "qz", plan) == [TEXTS[2]]


def test_a_write_after_its_pooled_connections_were_terminated_is_stored_once(
    store: PostgresStore, postgres_dsn: str
) -> None:
    db = store.get("p", create=True)
    _fill(db)
    _fill_the_pool(store)
    _terminate_others(postgres_dsn)
    with db.write() as conn:
        conn.execute("UPDATE memories SET importance = 'high' WHERE id = ?", (1,))
        conn.execute("INSERT INTO sessions VALUES ('s2', 'x', 'x', 0, 0)")
    with db.read() as conn:
        assert conn.execute("SELECT importance FROM memories WHERE id = 1").fetchone() == ("high",)
        assert conn.execute("SELECT count(*) FROM sessions WHERE session_id = 's2'").fetchone() == (1,)


def test_a_failed_first_statement_rolls_back_and_the_connection_serves_the_next(store: PostgresStore) -> None:
    db = store.get("p", create=True)
    _fill(db)
    with pytest.raises(psycopg.errors.UndefinedTable), db.read() as conn:
        conn.execute("SELECT * FROM no_such_table WHERE id = ?", (1,))
    with pytest.raises(psycopg.errors.UniqueViolation), db.write() as conn:
        conn.execute("INSERT INTO sessions VALUES ('s9', 'x', 'x', 0, 0)")
        conn.execute("INSERT INTO sessions VALUES ('s9', 'x', 'x', 0, 0)")
    assert _search(db, "retries") == [TEXTS[1]]
    with db.read() as conn:
        assert conn.execute("SELECT count(*) FROM sessions WHERE session_id = 's9'").fetchone() == (0,)
    assert store._pool.get_stats().get("returns_bad", 0) == 0


def test_a_transaction_without_statements_costs_no_exchange(store: PostgresStore, postgres_dsn: str) -> None:
    db = store.get("p", create=True)
    _fill_the_pool(store)
    _terminate_others(postgres_dsn)
    with db.read() as conn:  # nothing sent: the dead connection goes back unnoticed, and no error is raised
        assert conn.in_transaction
    assert _search(db, "anything") == []


def test_searches_answer_across_a_server_restart() -> None:
    server = PostgresTestServer()
    try:
        server.start()
        store = PostgresStore(server.fresh_database(), pool_size=POOL_SIZE)
        try:
            db = store.get("p", create=True)
            _fill(db)
            _fill_the_pool(store)
            server.restart()
            for _ in range(POOL_SIZE + 1):
                assert _search(db, "parser") == [TEXTS[2], TEXTS[0]]
        finally:
            store.close()
    finally:
        server.stop()


def test_a_pool_of_one_replaces_its_terminated_connection(postgres_dsn: str) -> None:
    """The closed connection goes back to the pool before another is asked for: a pool at its size never
    waits for the connection the transaction itself holds."""
    store = PostgresStore(postgres_dsn, pool_size=1)
    try:
        db = store.get("p", create=True)
        _fill(db)
        assert _terminate_others(postgres_dsn) == 1
        assert _search(db, "parser", "candidates") == [TEXTS[2], TEXTS[0]]
        assert store._pool.get_stats()["pool_size"] == 1
    finally:
        store.close()


def test_the_project_list_and_session_locks_after_their_pooled_connections_were_terminated_answer(
    store: PostgresStore, postgres_dsn: str
) -> None:
    """The statements outside a project's transactions (the project list that ``GET /v1/projects`` and the
    workers read, the indexer's session lock, the user tiers' list) replace a closed connection as a
    transaction does: they answered ``storage_error`` once for every dead connection in the pool."""
    db = store.get("p", create=True)
    tiers = store.user_tiers()
    tiers.get("alice", create=True)
    checks = [
        lambda: store.names() == ["p"],
        lambda: store.exists("p") and not store.exists("q"),
        lambda: tiers.names() == ["alice"],
        lambda: tiers.exists("alice"),
    ]
    for check in checks:
        _fill_the_pool(store)
        assert _terminate_others(postgres_dsn) >= POOL_SIZE
        for _ in range(POOL_SIZE + 1):
            assert check()
    _fill_the_pool(store)
    _terminate_others(postgres_dsn)
    with db.session_lock("index") as taken:
        assert taken
        with db.session_lock("index") as again:  # held on a live connection: a second holder is refused
            assert not again
    with db.session_lock("index") as taken:  # released at the end of the block
        assert taken


def test_a_session_lock_whose_connection_was_terminated_ends_without_an_error(
    store: PostgresStore, postgres_dsn: str
) -> None:
    """The lock went with its connection: an `obsmem index` that had indexed everything failed at the end
    with storage_error (exit 74) when its unlock met the closed connection."""
    db = store.get("p", create=True)
    with db.session_lock("index") as taken:
        assert taken
        assert _terminate_others(postgres_dsn) >= 1
    with db.session_lock("index") as taken:
        assert taken
    assert store.names() == ["p"]
