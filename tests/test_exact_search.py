"""Exact search answers exactly what a LIKE scan answers, whatever plan it picks."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from obsmem.app import Obsmem
from obsmem.dates import parse_window
from obsmem.errors import InvalidDate, InvalidQuery, ValidationFailed
from obsmem.projects import ProjectRegistry
from obsmem.retrieval.exact import ExactSearcher, fts_phrase, like_pattern

ALPHABET = "abcXYZ _%\\\"'*:-()éÉßİ0129"


def _reference(contents: list[tuple[str, str]], needle: str) -> list[int]:
    """Brute force: ASCII-only case folding, newest first (date desc, row desc)."""

    def fold(text: str) -> str:
        return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)

    rows = [(date, row, text) for row, (date, text) in enumerate(contents, start=1) if fold(needle) in fold(text)]
    return [row for date, row, _ in sorted(rows, reverse=True)]


def _load(db_dir: Path, contents: list[tuple[str, str]]):  # type: ignore[no-untyped-def]
    registry = ProjectRegistry(db_dir)
    db = registry.get("p", create=True)
    with db.write() as conn:
        conn.execute("INSERT INTO sessions VALUES ('s', 'x', 'x', 0, 0)")
        conn.executemany(
            "INSERT INTO memories(id, memory_id, kind, session_id, content, date, importance, created_at)"
            " VALUES (?, ?, 'observation', 's', ?, ?, 'low', 'x')",
            [(row, f"{row:064x}", text, date) for row, (date, text) in enumerate(contents, start=1)],
        )
    return registry, db


INF = float("inf")


def _window_searchers(conn) -> list[ExactSearcher]:  # type: ignore[no-untyped-def]
    """The window plan forced (no whole-table probe), with windows of 1, 2 and 5 rows (so the longer
    retries and the hand-over to the walk run too) and of the estimate's size."""
    return [
        ExactSearcher(conn, index_plan_max_docs=-1, window_plan_walk_rows=-1, window_first_rows=rows)
        for rows in (1, 2, 5, None)
    ]


corpus = st.lists(
    st.tuples(
        st.sampled_from(["2026-01-01 10:00:00", "2026-01-02 08:30:00", "2026-01-03 23:59:00"]),
        st.text(alphabet=ALPHABET, min_size=1, max_size=40),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(contents=corpus, data=st.data())
def test_every_plan_matches_the_reference(tmp_path_factory: pytest.TempPathFactory, contents, data) -> None:  # type: ignore[no-untyped-def]
    source = data.draw(st.sampled_from(contents))[1]
    start = data.draw(st.integers(0, max(0, len(source) - 1)))
    length = data.draw(st.integers(1, 8))
    needle = data.draw(
        st.one_of(st.just(source[start : start + length]), st.text(alphabet=ALPHABET, min_size=1, max_size=6))
    )
    needle = "".join(c.upper() if data.draw(st.booleans()) and c.isascii() else c for c in needle).strip()
    if not needle:
        return
    registry, db = _load(tmp_path_factory.mktemp("db"), contents)
    try:
        expected = _reference(contents, needle)
        conn = db.connection()
        like_rows = [
            row[0]
            for row in conn.execute(
                "SELECT id FROM memories WHERE content LIKE ? ESCAPE '\\' ORDER BY date DESC, id DESC",
                (like_pattern(needle),),
            )
        ]
        assert like_rows == expected
        window = parse_window()
        for searcher in (
            ExactSearcher(conn),  # planner's choice
            # always the index: trigram probe, or the vocabulary for short needles
            ExactSearcher(conn, index_plan_max_docs=10**9, posting_cost=0, short_needle_walk_rows=-1),
            ExactSearcher(
                conn, index_plan_max_docs=-1, walk_budget_steps=3, window_plan_walk_rows=INF
            ),  # walk, then hand over
            ExactSearcher(
                conn, index_plan_max_docs=-1, walk_budget_steps=10**9, window_plan_walk_rows=INF
            ),  # walk only
            *_window_searchers(conn),
        ):
            for limit in (1, 3, 50):
                hits, truncated = searcher.search(needle, window, limit)
                assert [int(hit.memory_id, 16) for hit in hits] == expected[:limit]
                assert truncated == (len(expected) > limit)
    finally:
        registry.close()


@pytest.fixture
def dated(service: Obsmem) -> Obsmem:
    service.append_events("p", "s1", [{"role": "user", "content": "x"} for _ in range(3)])
    service.append_events("p", "s2", [{"role": "user", "content": "x"}])
    items = [
        ("s1", "2026-03-01 09:00", "deploy MapToolArguments fix"),
        ("s1", "2026-03-01 23:59", "MapToolArguments regression found"),
        ("s1", "2026-03-02 00:00", "reverted maptoolarguments change"),
        ("s2", "2026-03-05 12:30", "MapToolArguments v2 shipped, ticket #2510"),
    ]
    service.add_observations(
        "p",
        [
            {"session_id": s, "timestamp": t, "content": c, "importance": "medium", "source_refs": [1]}
            for s, t, c in items
        ],
    )
    return service


def _contents(result) -> list[str]:  # type: ignore[no-untyped-def]
    return [hit.content for hit in result.hits]


def test_newest_first_case_insensitive(dated: Obsmem) -> None:
    result = dated.search("p", "MAPTOOLarguments")
    assert _contents(result) == [
        "MapToolArguments v2 shipped, ticket #2510",
        "reverted maptoolarguments change",
        "MapToolArguments regression found",
        "deploy MapToolArguments fix",
    ]
    assert result.truncated is False and result.partial is False and result.mode == "exact"
    hit = result.hits[0].to_dict()
    assert set(hit) == {"id", "memory_id", "kind", "session_id", "date", "importance", "content"}
    assert hit["date"] == "2026-03-05 12:30" and len(hit["id"]) == 12 and hit["memory_id"].startswith(hit["id"])


def test_multi_word_query_is_one_phrase(dated: Obsmem) -> None:
    assert _contents(dated.search("p", "regression found")) == ["MapToolArguments regression found"]
    assert dated.search("p", "found regression").hits == []


def test_limit_and_truncated(dated: Obsmem) -> None:
    result = dated.search("p", "maptoolarguments", limit=2)
    assert len(result.hits) == 2 and result.truncated is True
    assert dated.search("p", "maptoolarguments", limit=4).truncated is False


def test_date_bounds(dated: Obsmem) -> None:
    assert len(dated.search("p", "maptool", after="2026-03-01", before="2026-03-01").hits) == 2
    assert _contents(dated.search("p", "maptool", before="2026-03-01 09:00")) == ["deploy MapToolArguments fix"]
    assert _contents(dated.search("p", "maptool", after="2026-03-02")) == [
        "MapToolArguments v2 shipped, ticket #2510",
        "reverted maptoolarguments change",
    ]


def test_session_filter_and_short_queries(dated: Obsmem) -> None:
    assert _contents(dated.search("p", "maptool", session_id="s2")) == ["MapToolArguments v2 shipped, ticket #2510"]
    assert _contents(dated.search("p", "#2")) == ["MapToolArguments v2 shipped, ticket #2510"]
    assert len(dated.search("p", "a").hits) == 4


@pytest.mark.parametrize(
    "query",
    ['"', "NEAR(a b)", "a AND b", "gpt-4", "c++", "foo:bar", "what is this?", "*", "col:", "^x", "'", "\\", "%", "_"],
)
def test_hostile_queries_are_literal(service: Obsmem, query: str) -> None:
    service.append_events("p", "s", [{"role": "user", "content": "x"}])
    content = f"left {query} right"
    service.add_observations(
        "p", [{"session_id": "s", "timestamp": "2026-01-01 10:00", "content": content, "source_refs": [1]}]
    )
    service.add_observations(
        "p", [{"session_id": "s", "timestamp": "2026-01-01 10:00", "content": "nothing here", "source_refs": [1]}]
    )
    assert _contents(service.search("p", query)) == [content]


@pytest.mark.parametrize(
    ("kwargs", "error", "field"),
    [
        ({"query": ""}, InvalidQuery, "query"),
        ({"query": "   "}, InvalidQuery, "query"),
        ({"query": "a\x00b"}, InvalidQuery, "query"),
        ({"query": "a\x01b"}, InvalidQuery, "query"),
        ({"query": "a\nb"}, InvalidQuery, "query"),
        ({"query": "x" * 1001}, InvalidQuery, "query"),
        ({"query": "\udcff"}, InvalidQuery, "query"),
        ({"query": 5}, InvalidQuery, "query"),
        ({"query": "a", "limit": 0}, ValidationFailed, "limit"),
        ({"query": "a", "limit": 51}, ValidationFailed, "limit"),
        ({"query": "a", "limit": True}, ValidationFailed, "limit"),
        ({"query": "a", "mode": "fuzzy"}, ValidationFailed, "mode"),
        ({"query": "a", "after": "2026-02-30"}, InvalidDate, "after"),
        ({"query": "a", "session_id": "../etc"}, ValidationFailed, "session_id"),
    ],
)
def test_bad_requests_name_the_field(dated: Obsmem, kwargs: dict, error: type, field: str) -> None:
    with pytest.raises(error) as caught:
        dated.search("p", **kwargs)
    assert caught.value.field == field and caught.value.status == 422


def test_fts_phrase_quotes_everything() -> None:
    assert fts_phrase('say "hi"') == '"say ""hi"""'
    assert like_pattern("50%_a\\") == "%50\\%\\_a\\\\%"


FILTER_DATES = ["2026-01-01 10:00:00", "2026-01-01 10:00:59", "2026-01-02 08:30:00", "2026-01-03 23:59:00"]
BOUNDS = [None, "2026-01-01", "2026-01-02", "2026-01-01 10:00", "2026-01-01 09:59", "2026-01-03 23:59"]


def _ascii_fold(text: str) -> str:
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)


def _in_window(stored: str, after: str | None, before: str | None) -> bool:
    """The documented bound rules, written out apart from obsmem.dates: a date-only bound covers its whole
    day and an HH:MM bound its whole minute, so each is compared at its own precision."""
    if after is not None and stored[: len(after)] < after:
        return False
    return before is None or stored[: len(before)] <= before


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    contents=st.lists(
        st.tuples(
            st.sampled_from(FILTER_DATES),
            st.sampled_from(["s", "t"]),
            st.text(alphabet=ALPHABET, min_size=1, max_size=20),
        ),
        min_size=1,
        max_size=25,
    ),
    data=st.data(),
)
def test_every_plan_applies_dates_and_session_like_the_reference(  # type: ignore[no-untyped-def]
    tmp_path_factory: pytest.TempPathFactory, contents, data
) -> None:
    needle = data.draw(st.text(alphabet=ALPHABET, min_size=1, max_size=4)).strip() or "a"
    after, before = data.draw(st.sampled_from(BOUNDS)), data.draw(st.sampled_from(BOUNDS))
    if after is not None and before is not None and after > before:
        return  # an error, tested elsewhere
    session = data.draw(st.sampled_from([None, "s", "t"]))
    registry = ProjectRegistry(tmp_path_factory.mktemp("db"))
    db = registry.get("p", create=True)
    with db.write() as conn:
        conn.executemany("INSERT INTO sessions VALUES (?, 'x', 'x', 0, 0)", [("s",), ("t",)])
        conn.executemany(
            "INSERT INTO memories(id, memory_id, kind, session_id, content, date, importance, created_at)"
            " VALUES (?, ?, 'observation', ?, ?, ?, 'low', 'x')",
            [(row, f"{row:064x}", sid, text, date) for row, (date, sid, text) in enumerate(contents, start=1)],
        )
    try:
        matching = [
            (date, row)
            for row, (date, sid, text) in enumerate(contents, start=1)
            if _ascii_fold(needle) in _ascii_fold(text) and _in_window(date, after, before) and session in (None, sid)
        ]
        expected = [row for _, row in sorted(matching, reverse=True)]
        conn = db.connection()
        window = parse_window(after, before)
        for searcher in (
            ExactSearcher(conn),
            ExactSearcher(conn, index_plan_max_docs=10**9, posting_cost=0, short_needle_walk_rows=-1),
            ExactSearcher(conn, index_plan_max_docs=-1, walk_budget_steps=3, window_plan_walk_rows=INF),
            ExactSearcher(conn, index_plan_max_docs=-1, walk_budget_steps=10**9, window_plan_walk_rows=INF),
            *_window_searchers(conn),
        ):
            for limit in (1, 50):
                hits, truncated = searcher.search(needle, window, limit, session)
                assert [int(hit.memory_id, 16) for hit in hits] == expected[:limit]
                assert truncated == (len(expected) > limit)
    finally:
        registry.close()


def test_an_hh_mm_before_bound_includes_a_reflection_stamped_within_that_minute(dated: Obsmem) -> None:
    from obsmem.memories import ReflectionIn, add_reflection

    observation = dated.search("p", "v2 shipped").hits[0].memory_id
    with dated.database("p").write() as conn:
        add_reflection(conn, ReflectionIn("s2", "Release train note", (observation,)))
        stored = conn.execute("SELECT date FROM memories WHERE kind = 'reflection'").fetchone()[0]
        assert len(stored) == 19  # seconds kept: a reflection is dated by its creation time
        # the last second of its minute, whenever the test runs
        conn.execute("UPDATE memories SET date = substr(date, 1, 17) || '59' WHERE kind = 'reflection'")
    minute = stored[:16]
    assert [hit.kind for hit in dated.search("p", "release train", before=minute).hits] == ["reflection"]
    assert [hit.kind for hit in dated.search("p", "release train", after=minute, before=minute).hits] == ["reflection"]
    assert [hit.kind for hit in dated.search("p", "release train", before=stored[:10]).hits] == ["reflection"]


def _phrase_corpus(count: int, shuffled_dates: bool) -> list[tuple[str, str]]:
    """Every trigram of ``login session`` common, its rarest three together in one memory of twelve, the
    phrase itself in one of 200: the class whose walk reads thousands of rows and whose trigrams are too
    common to probe across the whole table (the benchmark corpus at 1M has the same proportions)."""
    import random

    rng = random.Random(5)
    contents = []
    for row in range(count):
        draw = rng.random()
        if row % 200 == 7:
            text = "Login Session kept"
        elif draw < 0.08:
            text = "login sent to the server"
        elif draw < 0.5:
            text = "session expired after the retry"
        elif draw < 0.8:
            text = "begin the retry"
        else:
            text = "cache warmed"
        contents.append(f"{text} {row}")
    dates = sorted(f"2026-{1 + row * 12 // count:02d}-{1 + row // 100 % 20:02d} 10:00:00" for row in range(count))
    if shuffled_dates:
        rng.shuffle(dates)
    return list(zip(dates, contents, strict=True))


@pytest.mark.parametrize("shuffled_dates", [False, True])
def test_the_planner_takes_the_window_plan_for_a_rare_phrase_of_common_words(
    tmp_path: Path, shuffled_dates: bool
) -> None:
    contents = _phrase_corpus(20_000, shuffled_dates)
    registry, db = _load(tmp_path, contents)
    try:
        searcher = ExactSearcher(db.connection())
        # A short walk (limit 1) stays a walk; a rare trigram (`kep`) is probed across the whole table.
        plans = {1: "walk", 20: "window", 200: "window"}
        for needle in ("login session", "LOGIN SESSION KEPT", "in sess"):
            for limit in (1, 20, 200):
                hits, truncated = searcher.search(needle, parse_window(), limit)
                expected = _reference(contents, needle)
                assert [int(hit.memory_id, 16) for hit in hits] == expected[:limit]
                assert truncated == (len(expected) > limit)
                assert searcher.last_plan is not None
                if not shuffled_dates:  # dates in id order: each window is a narrow id range
                    assert searcher.last_plan.name == ("candidates" if "KEPT" in needle else plans[limit])
    finally:
        registry.close()


def test_plan_samples_are_kept_for_the_most_recently_searched_databases_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from obsmem.retrieval import exact

    monkeypatch.setattr(exact, "SAMPLE_CACHE_DATABASES", 2)
    monkeypatch.setattr(exact.TrigramSample, "_cache", exact.OrderedDict())
    registries, names = [], []
    try:
        for number in range(3):
            registry, db = _load(tmp_path / f"db{number}", [("2026-01-01 10:00:00", f"deploy number {number}")])
            registries.append(registry)
            conn = db.connection()
            names.append(conn.filename)
            hits, _ = ExactSearcher(conn).search(f"number {number}", parse_window(), 5)
            assert len(hits) == 1
        ExactSearcher(registries[1].get("p").connection()).search("deploy", parse_window(), 5)
        assert list(exact.TrigramSample._cache) == [(names[2], "memories"), (names[1], "memories")]
    finally:
        for registry in registries:
            registry.close()
