"""Outside a begun transaction, each statement of an exact search goes by itself, naming its project's
schema: no ``BEGIN``, no ``search_path``, nothing left to end, and on a pooled connection that served
another project just before, the answer is still this project's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from obsmem.dates import parse_window
from obsmem.retrieval.corpus import EVENTS
from obsmem.retrieval.exact_postgres import Plan, PostgresExactSearcher, qualified
from obsmem.storage import PostgresStore
from obsmem.storage.postgres import PostgresProjectDatabase

psycopg = pytest.importorskip("psycopg")

PLANS: tuple[Plan, ...] = ("walk", "candidates", "date-walk")


@pytest.fixture
def store(postgres_dsn: str) -> Iterator[PostgresStore]:
    store = PostgresStore(postgres_dsn, pool_size=1)  # one connection: every project's searches share it
    yield store
    store.close()


def _fill(db: PostgresProjectDatabase, texts: list[str]) -> None:
    with db.write() as conn:
        conn.execute("INSERT INTO sessions VALUES ('s1', 'x', 'x', 0, 0)")
        for n, text in enumerate(texts, start=1):
            conn.execute(
                "INSERT INTO memories(id, memory_id, kind, session_id, content, date, importance, created_at)"
                " VALUES (?, ?, 'observation', 's1', ?, ?, 'low', 'x')",
                (n, f"{n:064x}", text, f"2026-01-0{n} 10:00:00"),
            )


def test_searches_of_two_projects_on_one_connection_each_answer_their_own(store: PostgresStore) -> None:
    first, second = store.get("first", create=True), store.get("second", create=True)
    _fill(first, ["the parser fix for #2510", "qz in the first"])
    _fill(second, ["a parser of the second", "qz in the second", "more parser work"])
    for _ in range(2):
        for plan in PLANS:
            for db, parser, qz in (
                (first, ["the parser fix for #2510"], ["qz in the first"]),
                (second, ["more parser work", "a parser of the second"], ["qz in the second"]),
            ):
                with db.read() as conn:
                    searcher = PostgresExactSearcher(conn, plan=plan)
                    assert [hit.content for hit in searcher.search("parser", parse_window(), 20)[0]] == parser
                    assert [hit.content for hit in searcher.search("qz", parse_window(), 20)[0]] == qz
                    assert not conn.began  # nothing was opened, nothing to end
                    assert conn.held is not None
                    assert conn.held.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_a_failed_statement_alone_leaves_no_transaction_and_the_connection_serves_the_next(
    store: PostgresStore,
) -> None:
    db = store.get("p", create=True)
    _fill(db, ["the parser fix"])
    with pytest.raises(psycopg.errors.UndefinedTable), db.read() as conn:
        conn.execute_alone(f"SELECT id FROM {db.schema}.no_such_table", (), qualified=True)
    with db.read() as conn:
        assert conn.held is not None and conn.held.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        hits, _ = PostgresExactSearcher(conn).search("parser", parse_window(), 20)
    assert [hit.content for hit in hits] == ["the parser fix"]


def test_inside_a_begun_transaction_the_search_joins_it(store: PostgresStore) -> None:
    db = store.get("p", create=True)
    _fill(db, ["the parser fix"])
    with db.read() as conn:
        conn.execute("SELECT 1")  # the snapshot is open: the search's statements read in it
        hits, _ = PostgresExactSearcher(conn, plan="candidates").search("parser", parse_window(), 20)
        assert conn.began
    assert [hit.content for hit in hits] == ["the parser fix"]


def test_the_projects_tables_and_functions_are_qualified_and_nothing_else() -> None:
    sql = f"SELECT {EVENTS.columns} FROM events AS m WHERE obsmem_short_grams(m.content) @> ?::text[] ORDER BY m.id"
    assert qualified(sql, "obsmem_p_1") == (
        "SELECT obsmem_p_1.obsmem_event_id(m.session_id, m.seq), 'event', m.session_id,"
        " replace(substr(m.created_at, 1, 19), 'T', ' '), NULL, m.content, m.seq, m.role, m.type, m.tool_name,"
        " m.tool_args FROM obsmem_p_1.events AS m WHERE obsmem_p_1.obsmem_short_grams(m.content) @> ?::text[]"
        " ORDER BY m.id"
    )
    assert qualified("SELECT coalesce(max(id), 0) FROM memories", "s") == "SELECT coalesce(max(id), 0) FROM s.memories"
