"""The PostgreSQL exact searcher picks its plan from the needle: a rare identifier goes straight to the trigram
index (no walk first), a rare one- or two-character needle (or one without a run of three letters or digits)
to the index of short substrings instead of a scan of the table, a common needle is walked, a phrase of
common words (every trigram common, the phrase not) is looked up by the joins between its words, and a
needle whose trigrams and joins are all common, itself not, goes down the date index. The answers
of every plan are the literal-substring reference's (tests/test_postgres_exact_property.py checks that on
random corpora); here each choice is checked on a table large enough for it to matter."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from obsmem.dates import parse_window
from obsmem.retrieval.corpus import EVENTS
from obsmem.retrieval.exact_postgres import NeedleSample, PostgresExactSearcher, needle_word_joins, short_grams
from obsmem.storage import PostgresStore
from obsmem.storage.postgres import PostgresProjectDatabase

ROWS = 20_000
# Planted rows (id: text); every other row is BASE, but every 200th one also holds "login session".
BASE = "routine note number {} about the build: login for the session"
PLANTED = {
    4_321: "the MapToolArguments fix",
    9_876: "moved qz to the new parser",
    12_345: "ticket #9 closed",
    17_000: "the mapToolArguments regression",
}


@pytest.fixture(scope="module")
def database(postgres_server) -> Iterator[PostgresProjectDatabase]:  # type: ignore[no-untyped-def]
    dsn = postgres_server.fresh_database()
    store = PostgresStore(dsn, pool_size=2)
    try:
        db = store.get("p", create=True)
        with db.write() as conn:
            conn.execute("INSERT INTO sessions VALUES ('s1', 'x', 'x', 0, 0)")
            conn.execute(
                "INSERT INTO memories(id, memory_id, kind, session_id, content, date, importance, created_at)"
                " SELECT n, lpad(to_hex(n), 64, '0'), 'observation', 's1',"
                " 'routine note number ' || n || ' about the build: login for the session'"
                " || CASE WHEN n % 200 = 0 THEN ' (login session)' ELSE '' END,"
                " to_char(timestamp '2026-01-01' + n * interval '1 minute', 'YYYY-MM-DD HH24:MI:SS'), 'low', 'x'"
                " FROM generate_series(1, ?) AS n",
                (ROWS,),
            )
            for row, text in PLANTED.items():
                conn.execute("UPDATE memories SET content = ? WHERE id = ?", (text, row))
            conn.execute("ANALYZE memories")
        NeedleSample._cache.clear()
        yield db
    finally:
        store.close()
        postgres_server.drop_database(dsn)


def _search(db: PostgresProjectDatabase, needle: str, limit: int = 20) -> tuple[list[str], str]:
    with db.read() as conn:
        searcher = PostgresExactSearcher(conn)
        hits, truncated = searcher.search(needle, parse_window(), limit)
        assert not truncated or len(hits) == limit
        return [hit.content for hit in hits], searcher.last_plan


def _plan_text(db: PostgresProjectDatabase, sql: str, params: tuple[object, ...]) -> str:
    with db.read() as conn:
        return "\n".join(row[0] for row in conn.execute("EXPLAIN " + sql, params))


def test_a_rare_identifier_is_looked_up_in_the_trigram_index_without_a_walk(database: PostgresProjectDatabase) -> None:
    found, plan = _search(database, "maptoolARGUMENTS")
    assert found == ["the mapToolArguments regression", "the MapToolArguments fix"]  # newest first
    assert plan == "candidates"


@pytest.mark.parametrize(("needle", "expected"), [("QZ", "moved qz to the new parser"), ("#9", "ticket #9 closed")])
def test_a_rare_short_needle_is_looked_up_in_the_short_substring_index(
    database: PostgresProjectDatabase, needle: str, expected: str
) -> None:
    found, plan = _search(database, needle)
    assert found == [expected]
    assert plan == "short-candidates"
    explained = _plan_text(
        database,
        "WITH m AS MATERIALIZED (SELECT * FROM memories AS m"
        " WHERE obsmem_short_grams(m.content) @> ?::text[] AND (m.content || '') ILIKE ? ESCAPE '\\')"
        " SELECT m.id FROM m ORDER BY m.date DESC, m.id DESC LIMIT 21",
        (short_grams(needle), f"%{needle}%"),
    )
    assert "memory_short_grams" in explained and "Seq Scan" not in explained, explained


def test_an_absent_short_needle_finds_nothing_through_the_index(database: PostgresProjectDatabase) -> None:
    assert _search(database, "zq") == ([], "short-candidates")


def test_a_common_needle_is_walked(database: PostgresProjectDatabase) -> None:
    found, plan = _search(database, "Routine", limit=3)
    assert plan == "walk"
    newest = ((ROWS, " (login session)"), (ROWS - 1, ""), (ROWS - 2, ""))
    assert found == [BASE.format(n) + suffix for n, suffix in newest]


def test_a_phrase_of_common_words_is_looked_up_by_the_join_between_its_words(
    database: PostgresProjectDatabase,
) -> None:
    """Every trigram of ``login session`` is in every row, the phrase in one row of 200: the join ``gin ses``
    between its words is as rare as the phrase, and the index of joins yields just those rows."""
    found, plan = _search(database, "LOGIN session")
    assert plan == "word-joins"
    holding = [n for n in range(ROWS, 0, -200) if n not in PLANTED]
    assert found == [BASE.format(n) + " (login session)" for n in holding[:20]]
    explained = _plan_text(
        database,
        "WITH m AS MATERIALIZED (SELECT * FROM memories AS m"
        " WHERE obsmem_word_joins(m.content) @> ?::text[] AND strpos(lower(m.content), ?) > 0)"
        " SELECT m.id FROM m ORDER BY m.date DESC, m.id DESC LIMIT 21",
        (needle_word_joins("LOGIN session"), "login session"),
    )
    assert "memory_word_joins" in explained and "Seq Scan" not in explained, explained


def test_a_rare_phrase_whose_joins_are_common_goes_down_the_date_index(database: PostgresProjectDatabase) -> None:
    """``n for the session (`` is in one row of 200, but its joins (``for the``, ``the ses``) are in every
    row and its trigrams too: only the walk down the date index reads fewer rows."""
    found, plan = _search(database, "n for the session (")
    assert plan == "date-walk"
    holding = [n for n in range(ROWS, 0, -200) if n not in PLANTED]
    assert found == [BASE.format(n) + " (login session)" for n in holding[:20]]


def test_short_grams_are_those_the_index_function_lists(database: PostgresProjectDatabase) -> None:
    """Every pair (or the one character) of a needle is in the database function's list for a text holding
    it, under ASCII-only folding: ``É`` and ``İ`` stay themselves, as ``ILIKE`` under ``"C"`` leaves them."""
    text = "Ab-É İx #9 qZ"
    with database.read() as conn:
        (listed,) = conn.execute("SELECT obsmem_short_grams(?)", (text,)).fetchone()
    for needle in ("ab", "AB-", "b-É", "É", "İX", "#9", "Qz", "z"):
        assert set(short_grams(needle)) <= set(listed), needle
    assert "é" not in listed and "i̇x" not in listed  # no folding beyond ASCII


def test_a_rare_short_needle_in_tool_arguments_is_found_through_their_index(database: PostgresProjectDatabase) -> None:
    with database.write() as conn:
        conn.execute(
            "INSERT INTO events(session_id, seq, role, type, content, tool_args, created_at, fingerprint)"
            " SELECT 's1', n, 'assistant', 'tool_call', 'ran the build ' || n, '{\"path\": \"src/' || n || '.py\"}',"
            " to_char(timestamp '2026-01-01' + n * interval '1 minute', 'YYYY-MM-DD\"T\"HH24:MI:SS.000\"Z\"'), 'x'"
            " FROM generate_series(1, 5000) AS n"
        )
        conn.execute('UPDATE events SET tool_args = \'{"flag": "-Q"}\' WHERE seq = 1234')
        conn.execute("ANALYZE events")
    with database.read() as conn:
        searcher = PostgresExactSearcher(conn, corpus=EVENTS)
        rows = searcher.rows('"-q"', parse_window(), 21)
        assert searcher.last_plan == "short-candidates"
    assert [row[6] for row in rows] == [1234]
