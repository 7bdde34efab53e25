"""Exact search on PostgreSQL answers exactly what the literal-substring reference answers, whichever plan
answers: the searcher's bounded walk, its index candidates (the rarest trigrams, or the short substrings of
one- and two-character needles), the rows holding the needle's joins between words, or its walk down the
date index, and within those whichever plan PostgreSQL
picks (each of its index and scan plans forced in turn)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from obsmem.dates import parse_window
from obsmem.retrieval.corpus import EVENTS
from obsmem.retrieval.exact_postgres import Plan, PostgresExactSearcher
from obsmem.storage.postgres import PostgresProjectDatabase
from support.postgres import fresh_project

ALPHABET = "abcXYZ _%\\\"'*:-()éÉßİ0129"
# Planner settings that force each plan (the others off); the first is PostgreSQL's own choice.
PLANS = (
    (),
    ("enable_seqscan", "enable_indexscan"),  # the trigram index: bitmap scan
    ("enable_seqscan", "enable_bitmapscan"),  # the walk down memories_by_date
    ("enable_indexscan", "enable_bitmapscan"),  # a sequential scan
)


def _plans(data: st.DataObject) -> list[tuple[tuple[str, ...], int, Plan | None]]:
    """``(planner settings off, walk rows, searcher plan)``: the date walk under every planner setting;
    the walk, of a drawn length (often shorter than the corpus, so that both its answer and its hand-over
    to the query are checked); the index candidates under every planner setting; and the searcher's own
    choice from its estimate."""
    walk_rows = data.draw(st.integers(1, 12))
    return (
        [(disabled, 0, "date-walk") for disabled in PLANS]
        + [(disabled, walk_rows, "walk") for disabled in PLANS[:3]]
        + [(disabled, 0, "candidates") for disabled in PLANS]
        + [(disabled, 0, "word-joins") for disabled in PLANS]
        + [((), walk_rows, None)]
    )


def _reference(contents: list[tuple[str, str]], needle: str, session: str | None = None) -> list[int]:
    """Brute force: ASCII-only case folding, newest first (date desc, row desc)."""

    def fold(text: str) -> str:
        return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)

    rows = [
        (date, row)
        for row, (date, text) in enumerate(contents, start=1)
        if fold(needle) in fold(text) and (session is None or _session(row) == session)
    ]
    return [row for _, row in sorted(rows, reverse=True)]


def _session(row: int) -> str:
    return "s1" if row % 2 else "s2"


@pytest.fixture(scope="module")
def database(postgres_server) -> Iterator[PostgresProjectDatabase]:  # type: ignore[no-untyped-def]
    with fresh_project(postgres_server) as db:
        yield db


def _load(db: PostgresProjectDatabase, contents: list[tuple[str, str]]) -> None:
    with db.write() as conn:
        conn.execute("TRUNCATE memories, sessions CASCADE")
        conn.execute("INSERT INTO sessions VALUES ('s1', 'x', 'x', 0, 0), ('s2', 'x', 'x', 0, 0)")
        conn.executemany(
            "INSERT INTO memories(id, memory_id, kind, session_id, content, date, importance, created_at)"
            " VALUES (?, ?, 'observation', ?, ?, ?, 'low', 'x')",
            [(row, f"{row:064x}", _session(row), text, date) for row, (date, text) in enumerate(contents, start=1)],
        )


corpus = st.lists(
    st.tuples(
        st.sampled_from(["2026-01-01 10:00:00", "2026-01-02 08:30:00", "2026-01-03 23:59:00"]),
        st.text(alphabet=ALPHABET, min_size=1, max_size=40),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(contents=corpus, data=st.data())
def test_every_plan_matches_the_reference(database: PostgresProjectDatabase, contents, data) -> None:  # type: ignore[no-untyped-def]
    source = data.draw(st.sampled_from(contents))[1]
    start = data.draw(st.integers(0, max(0, len(source) - 1)))
    length = data.draw(st.integers(1, 8))
    needle = data.draw(
        st.one_of(st.just(source[start : start + length]), st.text(alphabet=ALPHABET, min_size=1, max_size=6))
    )
    needle = "".join(c.upper() if data.draw(st.booleans()) and c.isascii() else c for c in needle).strip()
    if not needle:
        return
    session = data.draw(st.sampled_from([None, "s1"]))
    _load(database, contents)
    expected = _reference(contents, needle, session)
    window = parse_window()
    for disabled, walk_rows, plan in _plans(data):
        with database.read() as conn:
            searcher = PostgresExactSearcher(conn, walk_rows=walk_rows, plan=plan)
            for setting in disabled:
                conn.execute(f"SET LOCAL {setting} = off")
            for limit in (1, 3, 50):
                hits, truncated = searcher.search(needle, window, limit, session)
                assert [int(hit.memory_id, 16) for hit in hits] == expected[:limit], (disabled, plan, limit)
                assert truncated == (len(expected) > limit)


def test_the_trigram_index_serves_a_rare_needle(database: PostgresProjectDatabase) -> None:
    """At a size where it matters, a rare identifier is answered from the trigram index: the searcher's
    candidates, whose probe statement PostgreSQL runs on that index (not a scan of the table)."""
    contents = [("2026-01-01 10:00:00", f"routine note number {n} about the build") for n in range(50_000)]
    contents[12_345] = ("2026-01-01 10:00:00", "the MapToolArguments fix")
    _load(database, contents)
    with database.write() as conn:
        conn.execute("ANALYZE memories")
    with database.read() as conn:
        plan = "\n".join(
            row[0]
            for row in conn.execute(
                "EXPLAIN SELECT id FROM memories AS m WHERE m.content ILIKE ? AND m.content ILIKE ?"
                " AND (m.content || '') ILIKE ? ESCAPE '\\'",
                ("%map%", "%ool%", "%maptoolarguments%"),
            )
        )
        assert "memory_trigrams" in plan and "Seq Scan" not in plan
        searcher = PostgresExactSearcher(conn)
        hits, truncated = searcher.search("maptoolARGUMENTS", parse_window(), 20)
        assert searcher.last_plan == "candidates"
    assert [hit.content for hit in hits] == ["the MapToolArguments fix"] and not truncated


def _load_events(db: PostgresProjectDatabase, events: list[tuple[str, str, str | None]]) -> None:
    with db.write() as conn:
        conn.execute("TRUNCATE memories, events, sessions CASCADE")
        conn.execute("INSERT INTO sessions VALUES ('s1', 'x', 'x', 0, 0), ('s2', 'x', 'x', 0, 0)")
        conn.executemany(
            "INSERT INTO events(id, session_id, seq, role, type, content, tool_args, created_at, fingerprint)"
            " VALUES (?, ?, ?, 'user', 'message', ?, ?, ?, 'x')",
            [
                (seq, _session(seq), seq, content, arguments, stamp)
                for seq, (stamp, content, arguments) in enumerate(events, start=1)
            ],
        )


def _event_reference(events: list[tuple[str, str, str | None]], needle: str) -> list[int]:
    """Content and arguments each on its own (never across the two), newest first (time desc, row desc)."""

    def fold(text: str) -> str:
        return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)

    found = [
        (stamp, seq)
        for seq, (stamp, content, arguments) in enumerate(events, start=1)
        if fold(needle) in fold(content) or (arguments is not None and fold(needle) in fold(arguments))
    ]
    return [seq for _, seq in sorted(found, reverse=True)]


event_corpus = st.lists(
    st.tuples(
        st.sampled_from(["2026-01-01T10:00:00.000Z", "2026-01-01T10:00:00.500Z", "2026-01-03T23:59:59.999Z"]),
        st.text(alphabet=ALPHABET, max_size=30),
        st.one_of(st.none(), st.text(alphabet=ALPHABET, max_size=20)),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=event_corpus, data=st.data())
def test_conversation_search_matches_the_reference_under_every_plan(
    database: PostgresProjectDatabase,
    events,  # type: ignore[no-untyped-def]
    data,  # type: ignore[no-untyped-def]
) -> None:
    source = data.draw(st.sampled_from(events))
    text = data.draw(st.sampled_from([source[1], source[2] or source[1]])) or "a"
    start = data.draw(st.integers(0, max(0, len(text) - 1)))
    needle = data.draw(
        st.one_of(
            st.just(text[start : start + data.draw(st.integers(1, 6))]),
            st.text(alphabet=ALPHABET, min_size=1, max_size=4),
        )
    )
    needle = "".join(c.upper() if data.draw(st.booleans()) and c.isascii() else c for c in needle).strip()
    if not needle:
        return
    _load_events(database, events)
    expected = _event_reference(events, needle)
    for disabled, walk_rows, plan in _plans(data):
        with database.read() as conn:
            searcher = PostgresExactSearcher(conn, corpus=EVENTS, walk_rows=walk_rows, plan=plan)
            for setting in disabled:
                conn.execute(f"SET LOCAL {setting} = off")
            for fetch in (1, 3, 50):
                rows = searcher.rows(needle, parse_window(), fetch)
                assert [row[6] for row in rows] == expected[:fetch], (disabled, plan, fetch)
