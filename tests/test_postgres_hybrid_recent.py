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


def test_a_terms_postings_are_read_from_the_key_alone(both: tuple[Obsmem, Obsmem]) -> None:
    """``p0012_covering_postings``: the key carries each posting's count and chunk length, so once vacuumed
    (autovacuum's work) a term's postings are an index-only scan, not a heap page per posting."""
    _, postgres = both
    index = postgres.indexer.project("p")  # type: ignore[union-attr]
    with postgres.store._pool.connection() as raw:  # type: ignore[attr-defined]  # autocommit: VACUUM
        raw.execute(f"SET search_path TO {index.db.schema}, public")
        raw.execute("VACUUM semantic_postings")
        (common,) = raw.execute(
            "SELECT token FROM semantic_postings GROUP BY token ORDER BY count(*) DESC, token LIMIT 1"
        ).fetchone()
        raw.execute("SET enable_seqscan = off")
        raw.execute("SET enable_bitmapscan = off")
        plan = "\n".join(
            row[0]
            for row in raw.execute(
                "EXPLAIN (ANALYZE, COSTS OFF) SELECT s.label, s.freq, s.length FROM semantic_postings AS s"
                " WHERE s.token = %s AND s.label >= 0",
                (common,),
            )
        )
        raw.execute("RESET enable_seqscan")
        raw.execute("RESET enable_bitmapscan")
    assert "Index Only Scan using semantic_postings_pkey" in plan and "Heap Fetches: 0" in plan, plan
    assert "rows=0.00" not in plan, plan  # postings were read (the word is in most chunks)


def _term_counts(
    service: Obsmem, words: list[str], bound: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int]], list[tuple[int, int]]]:
    """Each word's count newest first, the same in one request, and its count oldest first (common words)."""
    index = service.indexer.project("p")  # type: ignore[union-attr]
    with index.reader() as store:
        return (
            [store.term_postings(word, bound) for word in words],
            store.term_postings_many(words, bound),
            [store.term_postings_oldest(word, bound) for word in words],
        )


def test_term_counts_are_fts5s_counted_newest_first(both: tuple[Obsmem, Obsmem]) -> None:
    """PostgreSQL counts a term from its term row and walks only a term past the bound: each answer must be
    the count newest first up to the bound + 1 and the oldest label counted, as FTS5's walk gives, before
    and after memories change (the term rows follow the postings)."""
    sqlite, postgres = both
    words = VOCABULARY[:14] + ["absent", "the", VOCABULARY[2], VOCABULARY[2].upper()]  # one token, asked thrice
    past = under = 0
    for bound in (1, BOUND, 40, 1000):
        lite = _term_counts(sqlite, words, bound)
        assert _term_counts(postgres, words, bound) == lite, bound
        past += sum(count == bound + 1 for count, _ in lite[0])
        under += sum(0 < count <= bound for count, _ in lite[0])
    assert past >= 12 and under >= 12  # both ways of counting were asked for
    for service in (sqlite, postgres):
        with service.database("p").write() as conn:
            conn.execute(f"UPDATE memories SET content = '{VOCABULARY[13]} moved' WHERE id IN (3, 17, 44)")
            conn.execute("DELETE FROM memories WHERE id IN (5, 60, 61)")
        service.index("p")
    for bound in (1, BOUND, 1000):
        assert _term_counts(postgres, words, bound) == _term_counts(sqlite, words, bound), bound
