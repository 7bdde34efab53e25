"""The keyword list's bounded open search on PostgreSQL (``semantic.bm25.max_postings``): when even the
rarest query term is in more chunks than the bound, only the newest ``max_postings`` chunks holding it are
scored. PostgreSQL reads each term's postings from the oldest of those chunks up rather than whole; the
list must still be SQLite's (FTS5's), labels and scores."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from obsmem.app import Obsmem
from support.model_server import ModelServer
from support.semantic_service import VOCABULARY, add_memories, sqlite_and_postgres

BOUND = 12


@pytest.fixture
def both(tmp_path: Path, model_server: ModelServer, postgres_dsn: str) -> Iterator[tuple[Obsmem, Obsmem]]:
    with sqlite_and_postgres(tmp_path, model_server, postgres_dsn, bm25={"max_postings": BOUND}) as (sqlite, postgres):
        rng = random.Random(13)
        for session in range(2):
            items = [
                (f"2025-03-{1 + i % 28:02d} 1{i % 10}:{i % 60:02d}", " ".join(rng.choices(VOCABULARY[:12], k=10)))
                for i in range(60)
            ]
            for service in (sqlite, postgres):
                add_memories(service, "p", items, session=f"s{session}")
        sqlite.index("p")
        postgres.index("p")
        yield sqlite, postgres


def _keyword_list(service: Obsmem, query: str) -> tuple[list[tuple[int, float]], bool]:
    searcher = service.search_modes.hybrid_searcher()
    index = service.indexer.project("p")  # type: ignore[union-attr]
    with index.reader() as store:
        ranked = searcher.bm25.search(store, query, 50)
    return [(label, round(score, 6)) for label, score in ranked.items], ranked.full


def test_a_bounded_open_keyword_list_is_fts5s(both: tuple[Obsmem, Obsmem]) -> None:
    sqlite, postgres = both
    bounded = 0
    for query in VOCABULARY[:12] + [" ".join(VOCABULARY[:3]), f"{VOCABULARY[4]} {VOCABULARY[9]}"]:
        lite, lite_full = _keyword_list(sqlite, query)
        pg, pg_full = _keyword_list(postgres, query)
        assert pg == lite, query
        assert pg_full == lite_full
        bounded += lite_full and 0 < len(lite) <= BOUND
    assert bounded >= 10  # the common words of this corpus are past the bound: the newest chunks were scored
