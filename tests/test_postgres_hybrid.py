"""Hybrid search on PostgreSQL against a real server, held to the SQLite backend's answers.

The same memories go into a SQLite service and a PostgreSQL service (embeddings from the loopback model
server: hashed bags of words, deterministic); their hybrid searches must agree, their keyword scores must
be FTS5's BM25, a date window must lose nothing, an index rebuild must leave the canonical rows alone, and
a second service on the same database must search the index the first one built.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from obsmem.app import Obsmem
from obsmem.errors import NotOnPostgres, ValidationFailed
from obsmem.settings import load_settings
from support.model_server import ModelServer
from support.semantic_service import VOCABULARY, add_memories, semantic_settings


def _service(data_dir: Path, server: ModelServer, dsn: str | None, **overrides: Any) -> Obsmem:
    options: dict[str, Any] = {"semantic": semantic_settings(server, **overrides)}
    if dsn is not None:
        options["storage"] = {"backend": "postgres", "dsn": dsn}
    return Obsmem(load_settings(data_dir=data_dir, **options))


@pytest.fixture
def both(tmp_path: Path, model_server: ModelServer, postgres_dsn: str) -> Iterator[tuple[Obsmem, Obsmem]]:
    with (
        _service(tmp_path / "sqlite", model_server, None) as sqlite,
        _service(tmp_path / "pg", model_server, postgres_dsn) as postgres,
    ):
        assert type(postgres).__name__ == "PostgresObsmem"
        yield sqlite, postgres


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


def test_conversation_hybrid_and_event_indexing_are_refused(
    tmp_path: Path, model_server: ModelServer, postgres_dsn: str
) -> None:
    with pytest.raises(NotOnPostgres):
        _service(tmp_path, model_server, postgres_dsn, index={"events": True})
    with _service(tmp_path, model_server, postgres_dsn) as postgres:
        add_memories(postgres, "p", [("2025-01-01 10:00", "auth login")])
        with pytest.raises(ValidationFailed) as refused:
            postgres.search("p", "login", mode="hybrid", scope="conversation")
        assert refused.value.code == "mode_unavailable"
