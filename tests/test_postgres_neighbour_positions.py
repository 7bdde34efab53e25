"""Neighbour smoothing's reads on PostgreSQL, made ahead with the candidates' validation: where every chunk of
the memories beside each candidate sits, and of the candidate's own memory when it has several chunks. They
come as one more column of the validation (``_VALIDATION_PLACED``); what they place must be what the plain
positions query reads, and a search's smoothing must then need no read of its own."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from obsmem.app import Obsmem
from obsmem.indexer import Filter, PostgresIndexReader
from support.model_server import ModelServer
from support.semantic_service import VOCABULARY, add_memories, service_on


@pytest.fixture
def service(tmp_path: Path, model_server: ModelServer, postgres_dsn: str) -> Iterator[Obsmem]:
    """Two sessions of memories, one in three long enough for several chunks (120-byte chunks)."""
    with service_on(tmp_path, model_server, postgres_dsn, chunk_bytes=120, overlap_bytes=20) as service:
        rng = random.Random(3)
        for session in range(2):
            items = [
                (f"2025-04-{1 + i % 28:02d} 09:{i:02d}", " ".join(rng.choices(VOCABULARY, k=60 if i % 3 == 0 else 8)))
                for i in range(30)
            ]
            add_memories(service, "p", items, session=f"s{session}")
        service.index("p")
        yield service


def _reader(service: Obsmem) -> PostgresIndexReader:
    return service.indexer.project("p").reader()  # type: ignore[union-attr, return-value]


def test_validation_places_the_chunks_beside_each_candidate(service: Obsmem) -> None:
    with _reader(service) as store:
        labels = [int(row[0]) for row in store.conn.execute("SELECT id FROM semantic_chunks ORDER BY id")]
        valid = store.validate_scored(labels[::2], Filter(), None)
        placed = dict(store._positions)
    several = [chunk for chunk in valid.values() if chunk.chunk_count > 1]
    assert several and any(chunk.previous_row for chunk in valid.values())
    wanted: set[int] = set()
    for chunk in valid.values():
        wanted |= {row for row in (chunk.previous_row, chunk.next_row) if row is not None}
        if chunk.chunk_count > 1:
            wanted.add(chunk.memory_row)
    assert wanted <= placed.keys()
    with _reader(service) as fresh:  # read by the plain positions query
        expected: dict[int, list[tuple[int, int]]] = {}
        for memory_row, position, label in fresh.chunk_positions(sorted(placed)):
            expected.setdefault(memory_row, []).append((position, label))
    assert {row: chunks for row, chunks in placed.items() if chunks} == {row: sorted(c) for row, c in expected.items()}
    assert all(len(placed[chunk.memory_row]) == chunk.chunk_count for chunk in several)


def test_smoothing_reads_nothing_the_validation_did_not_place(service: Obsmem) -> None:
    """One candidate at a time, each a chunk of a memory of several chunks: nothing else places its memory."""
    searcher = service.search_modes.hybrid_searcher()
    with _reader(service) as store:
        lone = [
            int(row[0])
            for row in store.conn.execute(
                "SELECT min(c.id) FROM semantic_chunks AS c JOIN semantic_sources AS s ON s.memory_row = c.memory_row"
                " WHERE s.chunk_count > 1 GROUP BY c.memory_row ORDER BY c.memory_row"
            )
        ]
    assert len(lone) >= 10
    for label in lone:
        asked: list[list[int]] = []
        with _reader(service) as store:
            original = store._rows

            def rows(sql: str, params: object, original=original, asked=asked) -> object:  # noqa: ANN001
                if sql.startswith("SELECT memory_row, position, id FROM semantic_chunks"):
                    asked.append(list(params[0]))  # type: ignore[index]
                return original(sql, params)  # type: ignore[arg-type]

            store._rows = rows  # type: ignore[method-assign]
            valid = store.validate_scored([label], Filter(), None)
            neighbours = searcher._neighbours(store, [label], valid)
        with _reader(service) as plain:  # validated alone, every position read when smoothing asks
            expected = searcher._neighbours(plain, [label], plain.validate([label], Filter()))
        assert neighbours == expected and not asked, label
        assert len(neighbours[label]) >= 1 + (valid[label].previous_row is not None)  # its own next chunk too
