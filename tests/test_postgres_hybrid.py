"""Hybrid search on PostgreSQL against a real server, held to the SQLite backend's answers.

The same memories go into a SQLite service and a PostgreSQL service (embeddings from the loopback model
server: hashed bags of words, deterministic); their hybrid searches must agree, their keyword scores must
be FTS5's BM25, a date window must lose nothing, an index rebuild must leave the canonical rows alone, and
a second service on the same database must search the index the first one built.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from obsmem.app import Obsmem
from obsmem.errors import IndexBusy, SemanticSettingsMismatch, ValidationFailed
from obsmem.indexer import Filter
from obsmem.indexer.postgres_reader import vector_literal
from support.hybrid_reference import reference_search
from support.model_server import ModelServer
from support.semantic_service import (
    VOCABULARY,
    add_memories,
    corpus,
    service_on,
    sqlite_and_postgres,
)


@pytest.fixture
def both(tmp_path: Path, model_server: ModelServer, postgres_dsn: str) -> Iterator[tuple[Obsmem, Obsmem]]:
    with sqlite_and_postgres(tmp_path, model_server, postgres_dsn) as pair:
        yield pair


def _memories(count: int, seed: int = 7) -> list[tuple[str, str]]:
    """``count`` observations of random coding words, one a day from 2025-01-01, a few minutes apart."""
    rng = random.Random(seed)
    items = []
    for i in range(count):
        words = " ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(4, 14)))
        items.append((f"2025-{1 + (i // 28) % 12:02d}-{1 + i % 28:02d} {9 + i % 8:02d}:{i % 60:02d}", words))
    return items


def _fill(service: Obsmem, items: list[tuple[str, str]], sessions: int = 3) -> None:
    for s in range(sessions):
        add_memories(service, "p", items[s::sessions], session=f"s{s}")
    service.index("p")


def _ids(result: Any) -> list[str]:
    return [hit.memory_id for hit in result.hits]


def test_hybrid_search_answers_as_on_sqlite(both: tuple[Obsmem, Obsmem]) -> None:
    sqlite, postgres = both
    items = _memories(120)
    _fill(sqlite, items)
    _fill(postgres, items)
    status = postgres.status("p")
    assert (status.indexed_count, status.source_count) == (120, 120)
    assert status.index is not None and status.index.pending == 0 and status.index.graph
    rng = random.Random(3)
    agreeing = 0
    for _ in range(20):
        query = " ".join(rng.choice(VOCABULARY) for _ in range(3))
        lite = sqlite.search("p", query, mode="hybrid", limit=10)
        pg = postgres.search("p", query, mode="hybrid", limit=10)
        assert pg.mode == "hybrid" and len(pg.hits) == len(lite.hits)
        assert not pg.partial
        # The same keyword and vector candidates and the same fusion: the same best hit, and the same
        # memories near the top (where float rounding of equal scores may swap neighbours).
        assert _ids(pg)[0] == _ids(lite)[0]
        assert len(set(_ids(pg)[:5]) & set(_ids(lite)[:5])) >= 4
        agreeing += _ids(pg) == _ids(lite)
    assert agreeing >= 15


def test_keyword_scores_are_fts5_bm25(both: tuple[Obsmem, Obsmem]) -> None:
    sqlite, postgres = both
    items = _memories(80, seed=11)
    _fill(sqlite, items)
    _fill(postgres, items)
    for query in ("flaky login test", "mock the clock", "deploy rollback cache"):
        lite, _ = sqlite.search_stages("p", query, _bm25_only(), limit=50)
        pg, _ = postgres.search_stages("p", query, _bm25_only(), limit=50)
        assert _ids(pg) == _ids(lite)
    lite_scores = _keyword_scores(sqlite, "login clock")
    pg_scores = _keyword_scores(postgres, "login clock")
    assert lite_scores and [round(s, 6) for s in pg_scores] == [round(s, 6) for s in lite_scores]


def _bm25_only() -> Any:
    from obsmem.retrieval import SearchPlan

    return SearchPlan(lists=("bm25",))


def _keyword_scores(service: Obsmem, query: str) -> list[float]:
    searcher = service.search_modes.hybrid_searcher()
    index = service.indexer.project("p")  # type: ignore[union-attr]
    with index.reader() as store:
        ranked = searcher.bm25.search(store, query, 50)
    return [score for _, score in ranked.items]


def test_a_date_window_ranks_every_memory_inside_it(both: tuple[Obsmem, Obsmem]) -> None:
    _, postgres = both
    items = _memories(90, seed=5)
    _fill(postgres, items)
    inside = [content for stamp, content in items if "2025-02-01" <= stamp[:10] <= "2025-02-05"]
    result = postgres.search("p", "auth login", mode="hybrid", after="2025-02-01", before="2025-02-05", limit=50)
    assert sorted(hit.content for hit in result.hits) == sorted(inside)


def test_forget_leaves_hybrid_search_at_once_and_the_batch_removes_its_rows(both: tuple[Obsmem, Obsmem]) -> None:
    _, postgres = both
    ids = add_memories(postgres, "p", [("2025-01-01 10:00", "the flaky login test mocked the clock")])
    add_memories(postgres, "p", [("2025-01-02 10:00", "deploy cache rollback")])
    postgres.index("p")
    assert _ids(postgres.search("p", "flaky login", mode="hybrid"))[0] == ids[0]
    postgres.forget("p", ids[0])
    found = postgres.search("p", "flaky login", mode="hybrid")
    assert ids[0] not in _ids(found) and found.partial
    report = postgres.index("p")
    assert report.status.chunks == 1 and report.status.pending == 0


def test_conversation_hybrid_needs_event_indexing_as_on_sqlite(
    tmp_path: Path, model_server: ModelServer, postgres_dsn: str
) -> None:
    # Without semantic.index.events a conversation scope is mode_unavailable, as on SQLite (events indexed:
    # tests/test_postgres_conversation_hybrid.py).
    with service_on(tmp_path, model_server, postgres_dsn) as postgres:
        add_memories(postgres, "p", [("2025-01-01 10:00", "auth login")])
        with pytest.raises(ValidationFailed) as refused:
            postgres.search("p", "login", mode="hybrid", scope="conversation")
        assert refused.value.code == "mode_unavailable" and "semantic.index.events" in refused.value.message


def test_filters_match_the_brute_force_reference(tmp_path: Path, model_server: ModelServer, postgres_dsn: str) -> None:
    # The reference re-chunks every memory, builds each keyword document and BM25 table from scratch in
    # SQLite's FTS5 and ranks every vector exactly: the PostgreSQL index must give the same hits in order.
    with service_on(tmp_path, model_server, postgres_dsn) as service:
        items = corpus(300)
        add_memories(service, "p", items[:200], session="s1")
        add_memories(service, "p", items[200:], session="s2")
        service.index("p")
        db = service.store.get("p")  # type: ignore[attr-defined]
        cases: list[dict[str, str]] = [
            {},
            {"after": "2024-03-01", "before": "2024-03-03"},
            {"after": "2024-02-10 05:00", "before": "2024-02-10 05:59"},
            {"session_id": "s2"},
            {"after": "2024-05-01", "session_id": "s1"},
        ]
        for case in cases:
            for query in ("auth clock mock", "docker image layer"):
                result = service.search("p", query, limit=50, **case)
                with db.read() as conn:
                    expected = reference_search(conn, service.settings.semantic, query, limit=50, **case)
                assert _ids(result) == expected, (case, query)


def test_date_windows_never_omit_a_memory(tmp_path: Path, model_server: ModelServer, postgres_dsn: str) -> None:
    with service_on(tmp_path, model_server, postgres_dsn, index={"exact_scan_max_chunks": 60}) as service:
        add_memories(service, "p", corpus(250, seed=3))
        service.index("p")
        db = service.store.get("p")  # type: ignore[attr-defined]
        days = st.integers(min_value=0, max_value=360)

        @hyp_settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
        @given(
            start=days,
            length=st.integers(min_value=0, max_value=120),
            words=st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=4),
        )
        def window_has_no_omissions(start: int, length: int, words: list[str]) -> None:
            first = date(2024, 1, 1) + timedelta(days=start)
            after, before = first.isoformat(), (first + timedelta(days=length)).isoformat()
            query = " ".join(words)
            result = service.search("p", query, limit=50, after=after, before=before)
            with db.read() as conn:
                expected = reference_search(
                    conn, service.settings.semantic, query, limit=50, after=after, before=before
                )
            # Windows over 60 chunks go through the graph with the filter applied during the search (as
            # SQLite's larger windows do): the order may differ where the graph is approximate, never the set.
            assert set(_ids(result)) >= set(expected[: len(result.hits)])
            assert len(result.hits) == min(50, len(expected))

        window_has_no_omissions()


def _canonical(service: Obsmem) -> list[Any]:
    db = service.store.get("p")  # type: ignore[attr-defined]
    with db.read() as conn:
        return [
            conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
            for table in ("sessions", "events", "memories", "observation_sources")
        ]


def test_a_rebuild_never_touches_canonical_rows(tmp_path: Path, model_server: ModelServer, postgres_dsn: str) -> None:
    with service_on(tmp_path, model_server, postgres_dsn) as service:
        add_memories(service, "p", corpus(60))
        service.index("p")
        before = _canonical(service)
        first = service.search("p", "auth clock", limit=5)
    # Other chunk settings: the index is left as built until `obsmem index` adopts them; then every derived
    # row is dropped and rebuilt, the HNSW index made again.
    with service_on(tmp_path, model_server, postgres_dsn, chunk_bytes=400) as service:
        with pytest.raises(SemanticSettingsMismatch):
            service.search("p", "auth clock")
        report = service.index("p")
        assert report.totals.reset and report.status.indexed_count == 60 and report.status.graph
        assert _canonical(service) == before
        assert _ids(service.search("p", "auth clock", limit=5)) == _ids(first)
    # Other keyword settings: only the postings are rebuilt, no embedding work.
    with service_on(tmp_path, model_server, postgres_dsn, chunk_bytes=400, bm25={"context_characters": 50}) as service:
        report = service.index("p")
        assert report.totals.chunks_embedded == 0 and not report.totals.reset
        assert _canonical(service) == before
        assert service.search("p", "auth clock", limit=5).hits


def test_a_second_service_shares_the_index(tmp_path: Path, model_server: ModelServer, postgres_dsn: str) -> None:
    with (
        service_on(tmp_path / "a", model_server, postgres_dsn) as first,
        service_on(tmp_path / "b", model_server, postgres_dsn) as second,
    ):
        ids = add_memories(first, "p", corpus(40))
        first.index("p")
        # The second service never indexed: it searches the index the first one built, in the database.
        assert _ids(second.search("p", "auth clock mock")) == _ids(first.search("p", "auth clock mock"))
        assert second.status("p").indexed_count == 40
        later = add_memories(second, "p", [("2024-12-30 10:00", "zebra quagga okapi")])
        assert second.search("p", "zebra quagga okapi").partial
        first.index("p")  # the first service indexes what the second wrote
        assert _ids(second.search("p", "zebra quagga okapi"))[0] == later[0]
        second.forget("p", ids[0])
        assert ids[0] not in _ids(first.search("p", corpus(40)[0][1], limit=50))
        # One indexer per project across services: a batch holds the project's lock.
        index = first.indexer.project("p")  # type: ignore[union-attr]
        with index.db.session_lock("indexing") as held:
            assert held
            with pytest.raises(IndexBusy):
                second.index("p")
            assert second.indexer.is_indexing("p")  # type: ignore[union-attr]
        assert second.index("p").status.pending == 0


def test_background_indexing_catches_up(tmp_path: Path, model_server: ModelServer, postgres_dsn: str) -> None:
    section = {"index": {"background": True, "poll_seconds": 0.2}}
    with service_on(tmp_path, model_server, postgres_dsn, **section) as service:
        ids = add_memories(service, "p", [("2024-01-01 10:00", "zebra quagga okapi"), ("2024-01-02 10:00", "auth")])
        deadline = time.monotonic() + 30
        while service.status("p").indexed_count < 2:
            assert time.monotonic() < deadline, "the background indexer did not index the project"
            time.sleep(0.1)
        assert _ids(service.search("p", "zebra quagga okapi"))[0] == ids[0]


def test_the_hnsw_index_answers_with_the_configured_ef_search(
    tmp_path: Path, model_server: ModelServer, postgres_dsn: str
) -> None:
    # A graph search returns up to hnsw.ef_search results (pgvector's default is 40): the configured value
    # must reach it, or the vector list would stop short of its candidate budget.
    with service_on(tmp_path, model_server, postgres_dsn) as service:
        add_memories(service, "p", corpus(300, seed=9))
        service.index("p")
        index = service.indexer.project("p")  # type: ignore[union-attr]
        query = index.embedder.embed_query("auth clock mock docker")
        with index.reader() as store:
            store.conn.execute("SET LOCAL enable_seqscan = off")  # the graph, as on a large table
            plan = store.conn.execute(
                "EXPLAIN SELECT chunk FROM semantic_vectors ORDER BY embedding <=> ?::vector LIMIT 150",
                (vector_literal(query),),
            ).fetchall()
            assert "semantic_vectors_hnsw" in " ".join(row[0] for row in plan)
            graph, used = store.vector_candidates(query, 150, Filter(), exact_max=None, ef_search=256)
            exact, _ = store.vector_candidates(query, 150, Filter(lower="0000"), exact_max=None, ef_search=256)
        assert used and len(graph) == 150 and len(exact) == 150
        assert len({label for label, _ in graph} & {label for label, _ in exact}) >= 140
