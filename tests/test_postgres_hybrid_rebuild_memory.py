"""A keyword rebuild on PostgreSQL writes its postings as it goes (bounded memory) and ends with the same
rows as one written whole: a million chunks make about a hundred million postings, which held at once as
Python objects would need more memory than a server has to spare. It drops the postings' indexes while it
writes and builds them again at the end, so it must leave them as the migration made them."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from obsmem.app import Obsmem
from obsmem.indexer import postgres_keywords
from obsmem.settings import load_settings
from support.model_server import ModelServer
from support.semantic_service import VOCABULARY, add_memories, semantic_settings

TABLES = (
    "SELECT token, label, freq, length FROM semantic_postings ORDER BY token, label",
    "SELECT token, documents FROM semantic_terms ORDER BY token",
    "SELECT documents, tokens FROM semantic_keyword_totals",
    "SELECT memory_row, previous_row, next_row, digest FROM semantic_context ORDER BY memory_row",
)


def _keyword_rows(service: Obsmem) -> list[list[tuple[Any, ...]]]:
    index = service.indexer.project("p")  # type: ignore[union-attr]
    with index.db.read() as conn:
        return [conn.execute(sql).fetchall() for sql in TABLES]


def _postings_indexes(service: Obsmem) -> list[tuple[str, str]]:
    index = service.indexer.project("p")  # type: ignore[union-attr]
    with index.db.read() as conn:
        return conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'semantic_postings'"
            " AND schemaname = current_schema() ORDER BY indexname"
        ).fetchall()


def _rebuild(service: Obsmem) -> None:
    index = service.indexer.project("p")  # type: ignore[union-attr]
    with index.db.write() as conn:
        index.keywords.create(conn)


def test_a_rebuild_written_in_parts_matches_one_written_whole(
    tmp_path: Path, model_server: ModelServer, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load_settings(
        data_dir=tmp_path,
        semantic=semantic_settings(model_server),
        storage={"backend": "postgres", "dsn": postgres_dsn},
    )
    with Obsmem(settings) as service:
        rng = random.Random(9)
        for session in range(2):
            items = [
                (f"2025-02-{1 + i % 28:02d} 09:{i:02d}", " ".join(rng.choices(VOCABULARY, k=12))) for i in range(40)
            ]
            add_memories(service, "p", items, session=f"s{session}")
        service.index("p")
        synced = _keyword_rows(service)  # written memory by memory, the term counts kept as it went
        migrated = _postings_indexes(service)
        assert [name for name, _ in migrated] == ["semantic_postings_by_label", "semantic_postings_pkey"]
        _rebuild(service)
        assert _postings_indexes(service) == migrated
        whole = _keyword_rows(service)
        assert len(whole[0]) > 500 and whole[2][0][0] == 80
        assert whole == synced  # the rebuild counts its terms once, at the end: the same counts

        flushes = 0
        flush = postgres_keywords._Rows.flush

        def counted(rows: Any, conn: Any) -> None:
            nonlocal flushes
            flushes += 1
            flush(rows, conn)

        monkeypatch.setattr(postgres_keywords, "BUFFER_ROWS", 50)
        monkeypatch.setattr(postgres_keywords._Rows, "flush", counted)
        _rebuild(service)
        assert flushes >= len(whole[0]) // 100  # written as it went, every 50 postings or a little more
        assert _keyword_rows(service) == whole
        assert _postings_indexes(service) == migrated
