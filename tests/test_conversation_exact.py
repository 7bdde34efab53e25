"""Conversation search in exact mode: events answer the same literal-substring contract as memories.

The reference is a LIKE scan over event content and tool arguments (each on its own), newest first; every
plan exact search can pick must return exactly its rows.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from obsmem.app import Obsmem
from obsmem.dates import parse_window
from obsmem.errors import InvalidScope, NotFound
from obsmem.events import index_event_trigrams, unindexed_events
from obsmem.ids import canonical_json, event_id
from obsmem.projects import ProjectRegistry
from obsmem.retrieval import exact
from obsmem.retrieval.corpus import EVENTS
from obsmem.retrieval.exact import ExactSearcher, like_pattern
from obsmem.retrieval.recall import _events_with_prefix

ALPHABET = "abcXYZ _%\\\"'*:-()éÉßİ0129"
# The second and the last share a minute: a minute bound must cover its whole last second.
STAMPS = [
    "2026-01-01T10:00:00.000Z",
    "2026-01-02T08:30:00.250Z",
    "2026-01-03T23:59:59.999Z",
    "2026-01-02T08:30:59.999Z",
]
SESSIONS = ["s", "t", "u"]
Event = tuple[str, str, str, str | None]  # session, created_at, content, tool_args JSON text


def _fold(text: str) -> str:
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)


def _in_window(stamp: str, after: str | None, before: str | None) -> bool:
    """Date-only bounds cover the whole day, minute bounds the whole minute: compare that much of the stamp."""
    shown = stamp.replace("T", " ")
    return (after is None or shown[: len(after)] >= after) and (before is None or shown[: len(before)] <= before)


def _reference(
    events: list[Event], needle: str, session: str | None = None, after: str | None = None, before: str | None = None
) -> list[int]:
    """Brute force: ASCII-only case folding over content and arguments apart, newest first."""
    folded = _fold(needle)
    rows = [
        (stamp, row)
        for row, (sid, stamp, content, args) in enumerate(events, start=1)
        if (folded in _fold(content) or (args is not None and folded in _fold(args)))
        and session in (None, sid)
        and _in_window(stamp, after, before)
    ]
    return [row for _, row in sorted(rows, reverse=True)]


def _load(db_dir: Path, events: list[Event]):  # type: ignore[no-untyped-def]
    registry = ProjectRegistry(db_dir)
    db = registry.get("p", create=True)
    with db.write() as conn:
        conn.executemany("INSERT INTO sessions VALUES (?, 'x', 'x', 0, 0)", [(sid,) for sid in SESSIONS])
        conn.executemany(
            "INSERT INTO events(id, session_id, seq, role, type, content, tool_args, created_at, fingerprint)"
            " VALUES (?, ?, ?, 'assistant', ?, ?, ?, ?, 'f')",
            [
                (row, sid, row, "message" if args is None else "tool_call", content, args, stamp)
                for row, (sid, stamp, content, args) in enumerate(events, start=1)
            ],
        )
    return registry, db


texts = st.text(alphabet=ALPHABET, min_size=0, max_size=40)
conversation = st.lists(
    st.tuples(
        st.sampled_from(SESSIONS),
        st.sampled_from(STAMPS),
        texts,
        st.one_of(st.none(), texts.map(lambda t: json.dumps({"arg": t}, ensure_ascii=False))),
    ),
    min_size=1,
    max_size=30,
)
# Date bounds drawn from the stamps: the whole day or the whole minute of one of them, or none.
bounds = st.one_of(st.none(), st.sampled_from(STAMPS).flatmap(lambda s: st.sampled_from([s[:10], s[:16]]))).map(
    lambda bound: bound if bound is None else bound.replace("T", " ")
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=conversation, data=st.data())
def test_every_plan_matches_the_like_reference(tmp_path_factory: pytest.TempPathFactory, events, data) -> None:  # type: ignore[no-untyped-def]
    _, stamp, content, args = data.draw(st.sampled_from(events))
    source = data.draw(st.sampled_from([content, args or content])) or "a"
    start = data.draw(st.integers(0, max(0, len(source) - 1)))
    length = data.draw(st.integers(1, 8))
    needle = data.draw(
        st.one_of(st.just(source[start : start + length]), st.text(alphabet=ALPHABET, min_size=1, max_size=6))
    )
    needle = "".join(c.upper() if data.draw(st.booleans()) and c.isascii() else c for c in needle).strip()
    if not needle:
        return
    after, before = data.draw(bounds), data.draw(bounds)
    if after is not None and before is not None and after[:10] > before[:10]:
        after, before = before, after
    if after is not None and before is not None and after > before[: len(after)]:
        before = None  # the same day, the minute later than the day's end: keep a valid window
    session = data.draw(st.sampled_from([None, *SESSIONS]))
    registry, db = _load(tmp_path_factory.mktemp("db"), events)
    # The trigram index trails the appends by any number of events: the answer must not depend on it.
    indexed = data.draw(st.integers(0, len(events)))
    try:
        assert index_event_trigrams(db, max_events=indexed) == indexed
        expected = _reference(events, needle)
        conn = db.connection()
        pattern = like_pattern(needle)
        like_rows = [
            row[0]
            for row in conn.execute(
                "SELECT id FROM events WHERE content LIKE ? ESCAPE '\\' OR tool_args LIKE ? ESCAPE '\\'"
                " ORDER BY created_at DESC, id DESC",
                (pattern, pattern),
            )
        ]
        assert like_rows == expected
        window = parse_window()
        filtered_window = parse_window(after, before)
        filtered = _reference(events, needle, session, after, before)
        for searcher in (
            ExactSearcher(conn, corpus=EVENTS),  # planner's choice
            ExactSearcher(conn, corpus=EVENTS, index_plan_max_docs=10**9, posting_cost=0, short_needle_walk_rows=-1),
            ExactSearcher(conn, corpus=EVENTS, index_plan_max_docs=-1, walk_budget_steps=3),  # walk, hand over
            ExactSearcher(conn, corpus=EVENTS, index_plan_max_docs=-1, walk_budget_steps=10**9),  # walk only
            # The window plan over a two-row window, retried four times longer, then handed over.
            ExactSearcher(
                conn,
                corpus=EVENTS,
                index_plan_max_docs=-1,
                posting_cost=0,
                window_plan_walk_rows=-1,
                window_first_rows=2,
            ),
        ):
            for limit in (1, 3, 50):
                hits, truncated = searcher.search(needle, window, limit)
                assert [hit.seq for hit in hits] == expected[:limit]
                assert truncated == (len(expected) > limit)
                assert all(hit.memory_id == event_id(hit.session_id, hit.seq) for hit in hits)  # type: ignore[arg-type]
                # A session and a date window: the session walk reads the other partial date index.
                narrowed, more = searcher.search(needle, filtered_window, limit, session_id=session)
                assert [hit.seq for hit in narrowed] == filtered[:limit]
                assert more == (len(filtered) > limit)
    finally:
        registry.close()


@pytest.fixture
def talk(service: Obsmem) -> Obsmem:
    service.append_events(
        "p",
        "s1",
        [
            {"role": "user", "content": "why does MapToolArguments crash?", "created_at": "2026-03-01T09:00:00Z"},
            {
                "role": "assistant",
                "type": "tool_call",
                "content": "",
                "tool_name": "grep",
                "tool_args": {"pattern": "mapToolArguments", "path": "src/"},
                "created_at": "2026-03-01T09:00:05Z",
            },
            {"role": "tool", "type": "tool_result", "content": "src/tools.py:12", "created_at": "2026-03-01T09:00:06Z"},
        ],
    )
    service.append_events(
        "p", "s2", [{"role": "user", "content": "ship MapToolArguments v2", "created_at": "2026-03-05T12:30:00Z"}]
    )
    service.add_observations(
        "p",
        [
            {
                "session_id": "s1",
                "timestamp": "2026-03-02 10:00",
                "content": "MapToolArguments crash traced to src/tools.py",
                "importance": "high",
                "source_refs": [1, 3],
            }
        ],
    )
    return service


def test_scopes_route_to_memories_events_or_both(talk: Obsmem) -> None:
    memories = talk.search("p", "maptoolarguments")
    assert [hit.kind for hit in memories.hits] == ["observation"]
    assert talk.search("p", "maptoolarguments", scope="memories").to_dict() == memories.to_dict()

    conversation = talk.search("p", "maptoolarguments", scope="conversation")
    assert [(hit.session_id, hit.seq) for hit in conversation.hits] == [("s2", 1), ("s1", 2), ("s1", 1)]
    call = conversation.hits[1].to_dict()
    assert call == {
        "id": event_id("s1", 2)[:12],
        "event_id": event_id("s1", 2),
        "kind": "event",
        "session_id": "s1",
        "seq": 2,
        "role": "assistant",
        "type": "tool_call",
        "date": "2026-03-01 09:00",
        "content": "",
        "tool_name": "grep",
        "tool_args": {"path": "src/", "pattern": "mapToolArguments"},
    }

    both = talk.search("p", "maptoolarguments", scope="all")
    assert [(hit.kind, hit.date) for hit in both.hits] == [
        ("event", "2026-03-05 12:30"),
        ("observation", "2026-03-02 10:00"),
        ("event", "2026-03-01 09:00"),
        ("event", "2026-03-01 09:00"),
    ]
    limited = talk.search("p", "maptoolarguments", scope="all", limit=2)
    assert limited.hits == both.hits[:2] and limited.truncated is True
    assert both.truncated is False


def test_conversation_filters_by_session_and_whole_second_dates(talk: Obsmem) -> None:
    only_s1 = talk.search("p", "maptoolarguments", scope="conversation", session_id="s1")
    assert [hit.seq for hit in only_s1.hits] == [2, 1]
    # A minute bound covers the whole minute, fractions of the last second included.
    window = talk.search("p", "src/", scope="conversation", after="2026-03-01 09:00", before="2026-03-01 09:00")
    assert [hit.seq for hit in window.hits] == [3, 2]
    assert talk.search("p", "src/", scope="conversation", before="2026-02-28").hits == []


def test_a_bad_scope_is_refused_with_its_own_code(talk: Obsmem) -> None:
    for bad in ("events", "", "ALL", 3, ["all"]):
        with pytest.raises(InvalidScope) as caught:
            talk.search("p", "x", scope=bad)
        assert caught.value.code == "invalid_scope" and caught.value.field == "scope"
        assert str(bad) not in caught.value.message or bad in ("", 3)


def test_event_ids_are_derived_from_the_address_by_sql(tmp_path: Path) -> None:
    registry, db = _load(tmp_path, [("s", STAMPS[0], "hello", None), ("s", STAMPS[1], "world", '{"a":1}')])
    try:
        rows = db.query("SELECT obsmem_event_id(session_id, seq) FROM events ORDER BY seq")
        assert [row[0] for row in rows] == [event_id("s", 1), event_id("s", 2)]
    finally:
        registry.close()


def _indexed(db, needle: str) -> list[int]:  # type: ignore[no-untyped-def]
    rows = db.query("SELECT rowid FROM event_trigrams WHERE event_trigrams MATCH ? ORDER BY rowid", (f'"{needle}"',))
    return [row[0] for row in rows]


def test_the_trigram_index_trails_appends_and_keeps_indexed_rows_in_step(tmp_path: Path) -> None:
    events = [("s", STAMPS[0], f"alpha{n} note", None) for n in range(1, 8)]
    registry, db = _load(tmp_path, events)
    try:
        conn = db.connection()
        searcher = ExactSearcher(conn, corpus=EVENTS, posting_cost=0)
        window = parse_window()
        before = [hit.seq for hit in searcher.search("alpha3", window, 5)[0]]
        assert before == [3] and searcher.last_plan is not None and searcher.last_plan.name == "candidates"
        # An append does not index; the search found event 3 above the watermark by scanning it.
        assert _indexed(db, "alpha") == [] and unindexed_events(conn) == 7
        assert index_event_trigrams(db, max_events=5) == 5 and _indexed(db, "alpha") == [1, 2, 3, 4, 5]
        assert index_event_trigrams(db) == 2 and index_event_trigrams(db) == 0 and unindexed_events(conn) == 0
        with db.write() as writer:
            writer.execute("UPDATE events SET content = 'beta note' WHERE id = 2")
            writer.execute("DELETE FROM events WHERE id = 7")
            # The last id comes back for a new event: below the watermark, so indexed at once.
            writer.execute(
                "INSERT INTO events(id, session_id, seq, role, type, content, created_at, fingerprint)"
                " VALUES (7, 's', 8, 'user', 'message', 'gamma note', ?, 'f')",
                (STAMPS[2],),
            )
        assert _indexed(db, "alpha") == [1, 3, 4, 5, 6] and _indexed(db, "beta") == [2] and _indexed(db, "gamma") == [7]
        # The id keys follow the same watermark: the reused id's key is the new event's (filled after its insert).
        assert _keys(db) == {
            (event_id("s", seq)[:12], row) for row, seq in [(1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (6, 6), (7, 8)]
        }
        assert [hit.seq for hit in searcher.search("gamma", window, 5)[0]] == [8]
        # Every event up to the watermark is in date order, the reused id too; none above it.
        assert db.query("SELECT id FROM events WHERE in_date_order = 1 ORDER BY id") == [(n,) for n in range(1, 8)]
        walker = ExactSearcher(conn, corpus=EVENTS, index_plan_max_docs=-1, walk_budget_steps=10**9)
        assert [hit.seq for hit in walker.search("note", window, 10)[0]] == [8, 6, 5, 4, 3, 2, 1]
        assert [hit.seq for hit in searcher.search("alpha3", window, 5)[0]] == before
    finally:
        registry.close()


def _keys(db) -> set[tuple[str, int]]:  # type: ignore[no-untyped-def]
    return {(key, row) for key, row in db.query("SELECT key, event_row FROM event_keys")}


@pytest.mark.parametrize("indexed", [0, 3, 6])
def test_an_event_id_is_found_below_and_above_the_watermark(tmp_path: Path, indexed: int) -> None:
    registry, db = _load(tmp_path, [("s", STAMPS[0], f"note {n}", None) for n in range(1, 7)])
    try:
        index_event_trigrams(db, max_events=indexed)
        assert len(_keys(db)) == indexed
        conn = db.connection()
        for seq in range(1, 7):
            full = event_id("s", seq)
            for prefix in (full[:12], full[:20], full):
                assert [row[0] for row in _events_with_prefix(conn, prefix, None)] == [full]
            assert _events_with_prefix(conn, full[:12], "other") == []
        ids = [event_id("s", seq) for seq in range(1, 7)]
        missing = next(prefix for prefix in ("0" * 12, "f" * 12) if not any(full.startswith(prefix) for full in ids))
        assert _events_with_prefix(conn, missing, None) == []
    finally:
        registry.close()


def test_the_workers_housekeeping_catches_the_index_up(talk: Obsmem) -> None:
    conn = talk.database("p").connection()
    before = talk.search("p", "src/", scope="conversation").to_dict()
    assert unindexed_events(conn) > 0
    talk.worker_pool().housekeep()
    assert unindexed_events(conn) == 0
    assert talk.search("p", "src/", scope="conversation").to_dict() == before and before["hits"]


@settings(max_examples=300, deadline=None)
@given(session=st.text(min_size=1, max_size=20), seq=st.integers(1, 2**53))
def test_event_ids_hash_the_canonical_json_of_their_address(session: str, seq: int) -> None:
    document = {"kind": "event", "session_id": session, "seq": seq}
    assert event_id(session, seq) == hashlib.sha256(canonical_json(document)).hexdigest()


def test_recall_of_an_event_reaches_its_neighbours_across_seq_gaps(service: Obsmem) -> None:
    turns = [{"seq": seq, "role": "user", "content": f"turn {seq}"} for seq in (1, 10, 20, 30)]
    service.append_events("p", "s1", turns)
    service.append_events("p", "s2", [{"seq": 19, "role": "user", "content": "another session"}])
    recalled = service.recall("p", event_id("s1", 20)).to_dict()  # search.recall_neighbours = 3 each side
    assert [item["seq"] for item in recalled["before"]] == [1, 10]
    assert [item["seq"] for item in recalled["after"]] == [30]
    first = service.recall("p", event_id("s1", 1)).to_dict()
    assert first["before"] == [] and [item["seq"] for item in first["after"]] == [10, 20, 30]


def _count_event_ids(conn) -> list[int]:  # type: ignore[no-untyped-def]
    """Count every event id the connection derives from here on (the SQL function, registered again)."""
    calls = [0]

    def counted(session_id: str | None, seq: int | None) -> str | None:
        calls[0] += 1
        return None if session_id is None or seq is None else event_id(session_id, seq)

    conn.create_scalar_function("obsmem_event_id", counted, 2, deterministic=True)
    return calls


def test_recalling_and_forgetting_a_memory_hash_no_event_not_indexed_yet(service: Obsmem) -> None:
    service.append_events("p", "s1", [{"role": "user", "content": f"step {n}"} for n in range(1, 301)])
    service.add_observations(
        "p",
        [
            {"session_id": "s1", "timestamp": "2026-03-02 10:00", "content": f"note {n}", "source_refs": [n]}
            for n in (1, 2)
        ],
    )
    first, second = service.search("p", "note").hits[::-1]
    conn = service.database("p").connection()
    assert unindexed_events(conn) == 300
    calls = _count_event_ids(conn)
    recalled = service.recall("p", first.id).to_dict()
    assert recalled["memory"]["memory_id"] == first.memory_id and [e["seq"] for e in recalled["sources"]] == [1]
    assert service.forget("p", second.id).deleted.memory_id == second.memory_id
    assert calls[0] == 0  # neither looked at the 300 events above the watermark
    # An event's id is still found among them (that takes the scan), and forget still says what it names.
    assert service.recall("p", event_id("s1", 150)).to_dict()["event"]["seq"] == 150
    assert calls[0] >= 300
    with pytest.raises(NotFound) as caught:
        service.forget("p", event_id("s1", 7))
    assert "conversation event" in caught.value.message


def test_exact_search_derives_ids_only_for_the_events_it_returns(tmp_path: Path) -> None:
    # 23 of 1,000 events match (in their content or their arguments): three among the oldest of the 600
    # indexed (so a walk of the index reads all of it and runs out of its budget), twenty in the tail.
    matching = {n for n in range(20, 1001, 20) if n <= 60 or n > 600}
    events = [
        (
            "s",
            STAMPS[n % 3],
            f"zq zeta {n}" if n in matching and n % 40 == 0 else f"note {n}",
            '{"arg":"zq zeta"}' if n in matching and n % 40 == 20 else None,
        )
        for n in range(1, 1001)
    ]
    registry, db = _load(tmp_path, events)
    try:
        index_event_trigrams(db, max_events=600)  # an indexed head and a tail of 400 above the watermark
        conn = db.connection()
        calls = _count_event_ids(conn)
        window = parse_window()
        plans = [
            (ExactSearcher(conn, corpus=EVENTS, index_plan_max_docs=10**9, posting_cost=0), "zeta", "candidates"),
            (ExactSearcher(conn, corpus=EVENTS, index_plan_max_docs=-1, walk_budget_steps=10**9), "zeta", "walk"),
            (ExactSearcher(conn, corpus=EVENTS, index_plan_max_docs=-1, walk_budget_steps=3), "zeta", "walk+phrase"),
            (ExactSearcher(conn, corpus=EVENTS, index_plan_max_docs=-1, walk_budget_steps=3), "zq", "walk+scan"),
        ]
        for searcher, needle, plan in plans:
            calls[0] = 0
            hits, truncated = searcher.search(needle, window, 5)
            assert searcher.last_plan is not None and searcher.last_plan.name == plan
            assert len(hits) == 5 and truncated
            assert calls[0] == 6  # the limit and the one more that says truncated, not all 23 matches
    finally:
        registry.close()


def test_a_current_index_costs_housekeeping_no_write_transaction(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    registry, db = _load(tmp_path, [("s", STAMPS[0], f"note {n}", None) for n in range(1, 4)])
    try:
        writes: list[int] = []
        real_write = db.write

        def counted_write():  # type: ignore[no-untyped-def]
            writes.append(1)
            return real_write()

        monkeypatch.setattr(db, "write", counted_write)
        assert index_event_trigrams(db) == 3 and writes == [1]
        assert index_event_trigrams(db) == 0 and writes == [1]  # caught up: read, found nothing, no BEGIN IMMEDIATE
    finally:
        registry.close()


def test_the_plan_sample_reads_the_start_of_each_event_only(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Events of a megabyte (a tool's whole output): counting the trigrams of all of each in Python made one
    # search over 84 of them take 20 s. The sample holds the first SAMPLE_TEXT_CHARS of each, and the search
    # still finds what lies beyond them.
    monkeypatch.setattr(exact.TrigramSample, "_cache", exact.OrderedDict())
    big = "abcdefghij " * 100_000
    events = [("s", STAMPS[0], big + f"tail {n}", None) for n in range(1, 5)]
    registry, db = _load(tmp_path, events)
    try:
        conn = db.connection()
        hits, _ = ExactSearcher(conn, corpus=EVENTS).search("tail 3", parse_window(), 5)
        sample = exact.TrigramSample.for_connection(conn, conn.fts5_tokenizer("trigram", []), EVENTS)
        assert [hit.content.endswith("tail 3") for hit in hits] == [True]
        assert sample.size == 4 and len(sample.folded) <= 4 * (exact.SAMPLE_TEXT_CHARS + 1)
    finally:
        registry.close()
