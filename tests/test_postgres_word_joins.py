"""The joins between words that ``p0011_word_joins`` indexes: every join the searcher looks up for a needle
is listed by the database's ``obsmem_word_joins`` for every text holding the needle (or a row would be
missed), and a search through them answers what the literal-substring reference answers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from obsmem.dates import parse_window
from obsmem.retrieval.corpus import EVENTS, MEMORIES
from obsmem.retrieval.exact_postgres import PostgresExactSearcher, needle_word_joins
from obsmem.storage.postgres import PostgresProjectDatabase
from support.postgres import fresh_project

WORD_CHARACTERS = "abcXYZ019éß"
GAP_CHARACTERS = " -,:\"'\n_%é()"
words = st.text(alphabet=WORD_CHARACTERS, min_size=1, max_size=6)
gaps = st.text(alphabet=GAP_CHARACTERS, min_size=1, max_size=6)
texts = st.lists(st.tuples(words, gaps), min_size=1, max_size=8).map(lambda parts: "".join(w + g for w, g in parts))


@pytest.fixture(scope="module")
def database(postgres_server) -> Iterator[PostgresProjectDatabase]:  # type: ignore[no-untyped-def]
    with fresh_project(postgres_server) as db:
        yield db


def _listed(db: PostgresProjectDatabase, text: str) -> list[str]:
    with db.read() as conn:
        return conn.execute("SELECT obsmem_word_joins(?)", (text,)).fetchone()[0]


def test_the_joins_listed_for_a_text(database: PostgresProjectDatabase) -> None:
    assert _listed(database, "Login  session, OK: go") == ["gin  ses", "ion, ok", "ok: go"]
    # A gap longer than four characters joins nothing; a letter beyond ASCII is part of a gap.
    assert _listed(database, "alpha ----- beta café bar") == ["eta caf", "caf\u00e9 bar"]
    assert _listed(database, "word") == [] and _listed(database, " ... ") == []


def test_a_needle_looks_up_the_joins_it_is_sure_of() -> None:
    assert needle_word_joins("LOGIN session") == ["gin ses"]
    assert needle_word_joins("n session") == []  # "n" may end any word
    assert needle_word_joins("a b c") == []  # "a" and "c" are ends, "b" is whole but has no sure neighbour
    assert needle_word_joins("x a b cde") == ["a b", "b cde"]  # inner words are whole
    assert needle_word_joins("alpha ----- beta") == []  # a gap longer than the index's
    assert needle_word_joins(" login ") == []  # a gap at an end may be part of a longer one


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=texts, data=st.data())
def test_every_join_of_a_needle_is_listed_for_every_text_holding_it(
    database: PostgresProjectDatabase,
    text: str,
    data,  # type: ignore[no-untyped-def]
) -> None:
    start = data.draw(st.integers(0, len(text) - 1))
    needle = text[start : start + data.draw(st.integers(1, 20))]
    needle = "".join(c.upper() if data.draw(st.booleans()) and c.isascii() else c for c in needle)
    assert set(needle_word_joins(needle)) <= set(_listed(database, text)), needle


def _load(db: PostgresProjectDatabase, contents: list[str]) -> None:
    with db.write() as conn:
        conn.execute("TRUNCATE memories, sessions CASCADE")
        conn.execute("INSERT INTO sessions VALUES ('s1', 'x', 'x', 0, 0)")
        conn.executemany(
            "INSERT INTO memories(id, memory_id, kind, session_id, content, date, importance, created_at)"
            " VALUES (?, ?, 'observation', 's1', ?, ?, 'low', 'x')",
            [(row, f"{row:064x}", text, f"2026-01-{1 + row % 3:02d} 10:00:00") for row, text in enumerate(contents, 1)],
        )


def _fold(text: str) -> str:
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(contents=st.lists(texts, min_size=1, max_size=25), data=st.data())
def test_a_search_through_the_joins_matches_the_reference(
    database: PostgresProjectDatabase,
    contents: list[str],
    data,  # type: ignore[no-untyped-def]
) -> None:
    source = data.draw(st.sampled_from(contents))
    start = data.draw(st.integers(0, len(source) - 1))
    needle = source[start : start + data.draw(st.integers(3, 16))].strip()
    if not needle:
        return
    _load(database, contents)
    matching = [
        (f"2026-01-{1 + row % 3:02d}", row) for row, text in enumerate(contents, 1) if _fold(needle) in _fold(text)
    ]
    expected = [row for _, row in sorted(matching, reverse=True)]
    # The first probe among the newest rows only (its boundary from the sample, which may be stale: any
    # boundary is correct), which finds enough or hands over to the probe of every row.
    for window_rows in (None, 1, 2, 5):
        with database.read() as conn:
            searcher = PostgresExactSearcher(conn, plan="word-joins", join_window_rows=window_rows)
            for limit in (1, 3, 50):
                hits, truncated = searcher.search(needle, parse_window(), limit)
                assert [int(hit.memory_id, 16) for hit in hits] == expected[:limit], (window_rows, limit)
                assert truncated == (len(expected) > limit)
            assert searcher.last_plan == ("word-joins" if needle_word_joins(needle) else "date-walk")


WINDOWS = (parse_window(), parse_window("2026-01-02", None), parse_window(None, "2026-01-02 10:30"))
STAMPS = ("2026-01-01T00:00:00.000Z", "2026-01-02T10:30:00.000Z", "2026-01-03T23:59:00.000Z")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(
        st.tuples(texts, st.none() | texts, st.sampled_from(STAMPS), st.sampled_from(["s1", "s2"])),
        min_size=1,
        max_size=30,
    ),
    data=st.data(),
)
def test_the_window_on_the_newest_rows_agrees_with_the_date_walk_under_every_filter(
    database: PostgresProjectDatabase,
    rows: list[tuple[str, str | None, str, str]],
    data,  # type: ignore[no-untyped-def]
) -> None:
    """Memories and events (content and tool arguments each), with date and session filters: the word-joins
    plan with its window of the newest rows (estimated, or a few rows, so that it often finds too few and
    hands over) answers what the walk down the date index answers (itself checked against the
    literal-substring reference in tests/test_postgres_exact_property.py)."""
    source = data.draw(st.sampled_from(rows))
    text = data.draw(st.sampled_from([source[0], source[1] or source[0]]))
    start = data.draw(st.integers(0, len(text) - 1))
    needle = text[start : start + data.draw(st.integers(3, 20))]
    with database.write() as conn:
        conn.execute("TRUNCATE memories, events, sessions CASCADE")
        conn.execute("INSERT INTO sessions VALUES ('s1', 'x', 'x', 0, 0), ('s2', 'x', 'x', 0, 0)")
        conn.executemany(
            "INSERT INTO events(id, session_id, seq, role, type, content, tool_args, created_at, fingerprint)"
            " VALUES (?, ?, ?, 'user', 'message', ?, ?, ?, 'x')",
            [(row, session, row, content, args, stamp) for row, (content, args, stamp, session) in enumerate(rows, 1)],
        )
        conn.executemany(
            "INSERT INTO memories(id, memory_id, kind, session_id, content, date, importance, created_at)"
            " VALUES (?, ?, 'observation', ?, ?, ?, 'low', 'x')",
            [
                (row, f"{row:064x}", session, content, stamp[:19].replace("T", " "))
                for row, (content, _, stamp, session) in enumerate(rows, 1)
            ],
        )
    for corpus in (MEMORIES, EVENTS):
        for window in WINDOWS:
            for session in (None, "s1"):
                with database.read() as conn:
                    walked = PostgresExactSearcher(conn, corpus=corpus, plan="date-walk").rows(
                        needle, window, 51, session
                    )
                    for window_rows in (None, 1, 3):
                        searcher = PostgresExactSearcher(
                            conn, corpus=corpus, plan="word-joins", join_window_rows=window_rows
                        )
                        for fetch in (1, 4, 51):
                            found = searcher.rows(needle, window, fetch, session)
                            assert found == walked[:fetch], (corpus.table, window, session, window_rows, fetch)
