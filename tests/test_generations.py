"""Generations on a real database: claim, compare-and-set promotion, the schema's guards, the ledger replay;
the id resolver models cite through, and the Dropper's ranking and cap."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from obsmem.app import Obsmem
from obsmem.memories import add_observations
from obsmem.pipeline import project, render_projection
from obsmem.pipeline.reflect.dropper import rank_and_cap
from obsmem.pipeline.reflect.generations import (
    GenerationLost,
    NewReflection,
    claim_generation,
    promote,
    promoted_chain,
    rebuild_active_memory,
)
from obsmem.pipeline.reflect.pool import IdResolver, PoolObservation, generation_id, read_pool, tier_of
from obsmem.storage.connection import ProjectDatabase


@pytest.fixture
def db(service: Obsmem) -> Iterator[ProjectDatabase]:
    service.append_events(
        "p", "s1", [{"role": "user", "content": f"message {i}", "created_at": "2026-05-01T10:00:00Z"} for i in range(8)]
    )
    receipt = add_observations(
        service.database("p"),
        [
            {
                "session_id": "s1",
                "content": f"fact number {i}",
                "timestamp": f"2026-05-01 10:0{i}",
                "importance": ("low", "medium", "high", "critical")[i % 4],
                "source_refs": [i + 1],
            }
            for i in range(8)
        ],
    )
    assert len(receipt.added) == 8
    yield service.database("p")


def reflection_over(pool_ids: list[str], text: str) -> NewReflection:
    from obsmem import ids

    supporting = tuple(sorted(pool_ids))
    return NewReflection(
        ids.reflection_id("s1", "2026-05-01 10:07", text, supporting), text, "2026-05-01 10:07", supporting
    )


def run_generation(db: ProjectDatabase, text: str, drop_count: int, cycle: str = "c1") -> str:
    with db.read() as conn:
        pool = read_pool(conn, "s1")
    with db.write() as conn:
        claim = claim_generation(conn, pool, job_id=1, cycle_id=cycle)
        assert claim is not None
        reflection = reflection_over([o.memory_id for o in pool.observations[:3]], text)
        drops = rank_and_cap(pool.observations[:drop_count], {}, 10**6, 0)
        result = promote(conn, claim, [reflection], drops, observation_tokens_after=0)
    assert result.state == "promoted"
    return claim.generation_id


def check_projection_equals_ledger(db: ProjectDatabase, session: str = "s1") -> None:
    with db.read() as conn:
        number, items = rebuild_active_memory(conn, session)
        assert project(conn, session).text == render_projection(session, items, number).text


def test_claim_promote_and_duplicates(db: ProjectDatabase) -> None:
    with db.read() as conn:
        pool = read_pool(conn, "s1")
    assert pool.generation_number == 0 and len(pool.observations) == 8
    with db.write() as conn:
        first = claim_generation(conn, pool, job_id=1, cycle_id="a")
        again = claim_generation(conn, pool, job_id=2, cycle_id="b")  # a retry takes the running claim over
    assert first is not None and again is not None and again.row == first.row and again.takeover
    with db.write() as conn, pytest.raises(GenerationLost):
        promote(conn, first, [reflection_over([pool.observations[0].memory_id], "x")], [], observation_tokens_after=0)
    with db.write() as conn:
        done = promote(
            conn, again, [reflection_over([pool.observations[0].memory_id], "x")], [], observation_tokens_after=0
        )
    assert done.state == "promoted" and done.number == 1
    with db.write() as conn:  # the same observation set again: done already
        assert claim_generation(conn, pool, job_id=3, cycle_id="c") is None
    assert db.query("SELECT count(*), max(claims) FROM generations") == [(1, 2)]
    check_projection_equals_ledger(db)


def test_no_reflection_leaves_the_generation_unchanged(db: ProjectDatabase) -> None:
    with db.read() as conn:
        pool = read_pool(conn, "s1")
    with db.write() as conn:
        claim = claim_generation(conn, pool, job_id=1, cycle_id="a")
        assert claim is not None
        assert promote(conn, claim, [], [], observation_tokens_after=0).state == "unchanged"
    assert db.query("SELECT count(*) FROM active_generation") == [(0,)]
    with db.write() as conn:
        assert claim_generation(conn, pool, job_id=2, cycle_id="b") is None  # not reflected on again


def test_compare_and_set_supersedes_a_claim_built_on_an_old_generation(db: ProjectDatabase) -> None:
    with db.read() as conn:
        stale_pool = read_pool(conn, "s1")
    with db.write() as conn:
        stale = claim_generation(conn, stale_pool, job_id=1, cycle_id="stale")
    assert stale is not None
    # Another run over a different set (a new observation arrived) is promoted first.
    add_observations(
        db, [{"session_id": "s1", "content": "late fact", "timestamp": "2026-05-01 11:00", "source_refs": [8]}]
    )
    run_generation(db, "winner", drop_count=2)
    before = db.query("SELECT count(*) FROM memories")
    with db.write() as conn:
        outcome = promote(
            conn,
            stale,
            [reflection_over([stale_pool.observations[5].memory_id], "loser")],
            [],
            observation_tokens_after=0,
        )
    assert outcome.state == "superseded" and outcome.number == 1
    assert db.query("SELECT count(*) FROM memories") == before  # nothing of the loser was written
    with pytest.raises(apsw.ConstraintError), db.write() as conn:  # and it can never be written again
        conn.execute("UPDATE generations SET state = 'promoted', number = 2 WHERE id = ?", (stale.row,))
    check_projection_equals_ledger(db)


def test_schema_guards_the_ledger(db: ProjectDatabase) -> None:
    run_generation(db, "first", drop_count=2)
    observation_row = db.query("SELECT observation_row FROM dropped_observations LIMIT 1")[0][0]
    generation_row = db.query("SELECT id FROM generations")[0][0]
    for statement, params in [
        ("UPDATE generations SET reflections_added = 9 WHERE id = ?", (generation_row,)),
        ("DELETE FROM generations WHERE id = ?", (generation_row,)),
        ("DELETE FROM dropped_observations WHERE observation_row = ?", (observation_row,)),
        ("UPDATE dropped_observations SET rank = 5 WHERE observation_row = ?", (observation_row,)),
        ("DELETE FROM active_generation WHERE session_id = ?", ("s1",)),
        ("UPDATE active_generation SET number = 5 WHERE session_id = ?", ("s1",)),
        ("DELETE FROM generation_reflections", ()),
        (
            "INSERT INTO dropped_observations(observation_row, session_id, generation_row, rank, citations,"
            " dropped_at) SELECT id, 's1', ?, 0, 0, 'x' FROM memories WHERE kind = 'observation' AND id NOT IN"
            " (SELECT observation_row FROM dropped_observations) LIMIT 1",
            (generation_row,),
        ),
    ]:
        with pytest.raises(apsw.ConstraintError), db.write() as conn:
            conn.execute(statement, params)
    check_projection_equals_ledger(db)


def test_forgetting_a_memory_takes_its_records_with_it(service: Obsmem, db: ProjectDatabase) -> None:
    run_generation(db, "first", drop_count=2)
    dropped_id = db.query(
        "SELECT m.memory_id FROM dropped_observations AS d JOIN memories AS m ON m.id = d.observation_row LIMIT 1"
    )[0][0]
    reflection_id = db.query("SELECT memory_id FROM memories WHERE kind = 'reflection'")[0][0]
    service.forget("p", dropped_id)
    service.forget("p", reflection_id)
    assert db.query("SELECT count(*) FROM dropped_observations") == [(1,)]
    assert db.query("SELECT count(*) FROM generation_reflections") == [(0,)]
    assert db.query("SELECT number FROM active_generation") == [(1,)]  # the history itself stays
    check_projection_equals_ledger(db)


def test_generations_chain_and_projection_equals_the_replayed_ledger(db: ProjectDatabase) -> None:
    for n in range(3):
        run_generation(db, f"reflection {n}", drop_count=1)
    with db.read() as conn:
        assert len(promoted_chain(conn, "s1")) == 3
        text = project(conn, "s1").text
    assert 'generation="3"' in text and "Reflections:" in text
    assert db.query("SELECT count(*) FROM dropped_observations") == [(3,)]
    check_projection_equals_ledger(db)
    # The replay really is independent: a drop record outside the chain shows up as a difference.
    with db.write() as conn:
        row = conn.execute(
            "INSERT INTO generations(generation_id, session_id, created_at) VALUES (?, 's1', 'x') RETURNING id",
            (hashlib.sha256(b"stray").hexdigest(),),
        ).fetchone()[0]
        conn.execute(
            "INSERT INTO dropped_observations(observation_row, session_id, generation_row, rank, citations, dropped_at)"
            " SELECT id, 's1', ?, 0, 0, 'x' FROM memories WHERE kind = 'observation' AND id NOT IN"
            " (SELECT observation_row FROM dropped_observations) LIMIT 1",
            (row,),
        )
    with db.read() as conn:
        number, items = rebuild_active_memory(conn, "s1")
        assert project(conn, "s1").text != render_projection("s1", items, number).text


def test_generation_id_depends_on_the_set_only() -> None:
    a, b = "a" * 64, "b" * 64
    assert generation_id("s1", [a, b]) == generation_id("s1", [b, a])
    assert generation_id("s1", [a]) != generation_id("s1", [a, b]) != generation_id("s2", [a, b])


# -- ids as models write them -------------------------------------------------------------------------------


def test_id_resolver_accepts_display_and_full_ids_and_explains_the_rest() -> None:
    first, second = "ab" * 32, "abcdef012345" + "1" * 52
    twin = "abcdef012345" + "2" * 52
    reflection = "cd" * 32
    resolver = IdResolver([first, second, twin], [reflection])
    assert resolver.resolve(first[:12]).memory_id == first
    assert resolver.resolve(f" [{first[:12].upper()}] ").memory_id == first
    assert resolver.resolve(first).memory_id == first
    assert resolver.resolve(second[:13]).memory_id == second  # a longer prefix settles the ambiguity
    ambiguous = resolver.resolve("abcdef012345")
    assert ambiguous.memory_id is None and "more than one" in (ambiguous.problem or "")
    assert "is a reflection" in (resolver.resolve(reflection[:12]).problem or "")
    assert "not an observation in the active memory" in (resolver.resolve("0" * 12).problem or "")
    assert "not a memory id" in (resolver.resolve("abc").problem or "")
    assert resolver.resolve(12345).memory_id is None


@settings(max_examples=200, deadline=None)
@given(
    ids=st.sets(st.text("0123456789abcdef", min_size=64, max_size=64), min_size=1, max_size=20),
    length=st.integers(12, 64),
)
def test_id_resolver_unique_prefixes_resolve(ids: set[str], length: int) -> None:
    resolver = IdResolver(ids)
    for memory_id in ids:
        prefix = memory_id[:length]
        found = resolver.resolve(prefix)
        sharing = [other for other in ids if other.startswith(prefix)]
        if len(sharing) == 1:
            assert found.memory_id == memory_id
        else:
            assert found.memory_id is None and "more than one" in (found.problem or "")


# -- the Dropper's ranking and cap ---------------------------------------------------------------------------


def observation(n: int, importance: str, citations: int, tokens: float = 10.0, day: int = 1) -> PoolObservation:
    return PoolObservation(n, f"{n:064x}", f"2026-05-{day:02d} 10:00", importance, f"fact {n}", tokens, citations)


def test_ranking_prefers_covered_then_unimportant_then_old() -> None:
    proposals = [
        observation(1, "low", 0),
        observation(2, "critical", 2),
        observation(3, "low", 2, day=3),
        observation(4, "low", 2, day=2),
        observation(5, "medium", 1),
        observation(6, "low", 1),
    ]
    drops = rank_and_cap(proposals, {}, pool_tokens=1000, target=0)
    assert [d.observation.row for d in drops] == [4, 3, 2, 6, 5, 1]
    assert [d.rank for d in drops] == list(range(6))
    assert [tier_of(d.citations) for d in drops][:3] == ["strongly covered"] * 3


def test_cap_is_the_overage() -> None:
    proposals = [observation(n, "low", 2, tokens=10) for n in range(1, 21)]
    assert rank_and_cap(proposals, {}, pool_tokens=100, target=100) == []
    assert len(rank_and_cap(proposals, {}, pool_tokens=125, target=100)) == 3  # 25 over: three of ten tokens
    assert len(rank_and_cap(proposals, {}, pool_tokens=10_000, target=100)) == 20  # all proposed, still over


@settings(max_examples=200, deadline=None)
@given(
    specs=st.lists(
        st.tuples(st.sampled_from(["low", "medium", "high", "critical"]), st.integers(0, 3), st.floats(1, 50)),
        min_size=0,
        max_size=30,
    ),
    pool=st.floats(0, 2000),
    target=st.integers(0, 1500),
)
def test_cap_drops_the_fewest_in_rank_order(specs: list[tuple[str, int, float]], pool: float, target: int) -> None:
    proposals = [observation(n, importance, cited, tokens) for n, (importance, cited, tokens) in enumerate(specs)]
    drops = rank_and_cap(proposals, {}, pool, target)
    freed = sum(d.observation.tokens for d in drops)
    if pool <= target:
        assert drops == []
        return
    # Enough to reach the target unless every proposal went; never one more than needed.
    assert freed >= pool - target or len(drops) == len(proposals)
    if drops:
        assert freed - drops[-1].observation.tokens < pool - target
    ranks = [
        (-min(d.citations, 2), ["low", "medium", "high", "critical"].index(d.observation.importance)) for d in drops
    ]
    assert ranks == sorted(ranks)
