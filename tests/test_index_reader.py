"""The index's read contract (``IndexReader``) on a real index: what each operation answers.

Hybrid search asks the index only through these operations, so a second storage backend must answer
them the same way; these tests say what that means, one operation at a time, on real SQLite files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import obsmem.retrieval
from obsmem.indexer.reader import IndexReader, fts_match
from obsmem.indexer.vectors import Filter
from support.model_server import ModelServer
from support.semantic_service import add_memories, make_service

MEMORIES = [
    ("2024-01-01 10:00", "docker image layer cache"),
    ("2024-01-02 10:00", "release tag branch"),
    ("2024-01-03 10:00", "docker compose volumes"),
    ("2024-01-04 10:00", "running docker builds nightly"),
]


# No neighbour text in the keyword rows, so a term matches exactly the memories whose own text holds it
# (the neighbours themselves are still recorded).
NO_CONTEXT = {"bm25": {"context_characters": 0}}


@pytest.fixture
def indexed(tmp_path: Path, model_server: ModelServer):  # noqa: ANN201
    """A service whose project ``p`` holds :data:`MEMORIES` (session s1), indexed, and their ids."""
    with make_service(tmp_path, model_server, **NO_CONTEXT) as service:
        ids = add_memories(service, "p", MEMORIES)
        service.index("p")
        yield service, ids


def labels_by_memory(store: IndexReader, memory_ids: list[str]) -> dict[str, int]:
    """Each memory's label (one chunk each here), found by validating a generous label range."""
    valid = store.validate(range(1, 100), Filter())
    return {chunk.memory_id: label for label, chunk in valid.items() if chunk.memory_id in memory_ids}


def test_readiness_counts_follow_indexing_and_edits(tmp_path: Path, model_server: ModelServer) -> None:
    with make_service(tmp_path, model_server) as service:
        ids = add_memories(service, "p", MEMORIES)
        index = service.indexer.project("p")
        with index.reader() as store:
            assert (store.source_count(), store.indexed_count(), store.has_pending()) == (4, 0, True)
            assert store.stale_chunks(10) == 0  # nothing indexed yet, so nothing stale
        service.index("p")
        with index.reader() as store:
            assert (store.source_count(), store.indexed_count(), store.has_pending()) == (4, 4, False)
            assert store.state().compatible_with(index.signature, index.keyword_signature)
        with service.database("p").write() as conn:
            conn.execute("UPDATE memories SET content = 'edited words' WHERE memory_id IN (?, ?)", (ids[0], ids[1]))
        with index.reader() as store:
            assert store.has_pending()
            assert store.stale_chunks(10) == 2
            assert store.stale_chunks(1) == 1  # counted up to the cap only


def test_validate_keeps_current_chunks_inside_the_filter(indexed) -> None:  # noqa: ANN001
    service, ids = indexed
    index = service.indexer.project("p")
    with index.reader() as store:
        labels = labels_by_memory(store, ids)
        assert set(labels) == set(ids)
        valid = store.validate(set(labels.values()), Filter())
        second = valid[labels[ids[1]]]
        assert second.row[0] == ids[1] and second.row[1] == "observation" and second.row[5] == MEMORIES[1][1]
        assert (second.position, second.chunk_count) == (0, 1)
        # Its neighbours in the session are the memories written before and after it.
        assert second.previous_row == valid[labels[ids[0]]].memory_row
        assert second.next_row == valid[labels[ids[2]]].memory_row
        assert valid[labels[ids[0]]].previous_row is None
        window = Filter(lower="2024-01-02 00:00:00", upper="2024-01-03 23:59:59")
        assert set(store.validate(set(labels.values()), window)) == {labels[ids[1]], labels[ids[2]]}
        assert store.validate(set(labels.values()), Filter(session_id="other")) == {}
        assert store.validate(set(), Filter()) == {}
        assert store.validate({10_000}, Filter()) == {}
    with service.database("p").write() as conn:
        conn.execute("UPDATE memories SET content = 'edited words' WHERE memory_id = ?", (ids[3],))
    service.forget("p", ids[0])
    with index.reader() as store:
        # Edited and forgotten memories fail validation before their chunks are re-indexed.
        assert set(store.validate(set(labels.values()), Filter())) == {labels[ids[1]], labels[ids[2]]}


def test_chunk_positions_and_stored_embeddings(indexed) -> None:  # noqa: ANN001
    service, ids = indexed
    index = service.indexer.project("p")
    vectors = index.vectors()
    assert vectors is not None
    with index.reader() as store:
        labels = labels_by_memory(store, ids)
        valid = store.validate(set(labels.values()), Filter())
        rows = {valid[label].memory_row: label for label in labels.values()}
        assert sorted(store.chunk_positions(set(rows))) == sorted((row, 0, label) for row, label in rows.items())
        assert list(store.chunk_positions({10_000})) == []
        stored = dict(store.embeddings(set(labels.values()) | {10_000}))
    assert set(stored) == set(labels.values())  # a label without a vector is left out
    for label, vector in stored.items():
        assert vector.dtype == np.float32
        assert np.array_equal(vector, vectors.matrix[vectors.slot_of[label]])


def test_keyword_terms_follow_the_tokenizer(tmp_path: Path, model_server: ModelServer) -> None:
    with make_service(tmp_path, model_server) as service:
        add_memories(service, "p", MEMORIES)
        with service.indexer.project("p").reader() as store:
            assert store.counts_postings()
            assert store.keyword_terms(["running", "docker"]) == [("running", ["run"]), ("docker", ["docker"])]
    trigram = {"bm25": {"tokenizer": "trigram"}}
    with make_service(tmp_path / "trigram", model_server, **trigram) as service:
        add_memories(service, "p", MEMORIES)
        with service.indexer.project("p").reader() as store:
            assert not store.counts_postings()  # per-trigram postings say nothing about a word
            assert store.keyword_terms(["ab", "docker"]) == [("docker", [])]  # shorter than a trigram: left out


def test_term_postings_count_newest_first_up_to_the_bound(indexed) -> None:  # noqa: ANN001
    service, ids = indexed
    with service.indexer.project("p").reader() as store:
        labels = labels_by_memory(store, ids)
        docker = sorted(labels[ids[i]] for i in (0, 2, 3))
        assert store.term_postings("docker", 10) == (3, docker[0])
        assert store.term_postings("docker", 1) == (2, docker[1])  # stopped one past the bound
        assert store.term_postings("absent", 10) == (0, 0)


def test_keyword_candidates_rank_best_first_inside_the_filter(indexed) -> None:  # noqa: ANN001
    service, ids = indexed
    with service.indexer.project("p").reader() as store:
        labels = labels_by_memory(store, ids)
        docker = {labels[ids[i]] for i in (0, 2, 3)}
        found = store.keyword_candidates(["docker", "compose"], 10)
        assert {label for label, _ in found} == docker
        assert found[0][0] == labels[ids[2]]  # the only chunk with both terms
        scores = [score for _, score in found]
        assert scores == sorted(scores, reverse=True) and all(score > 0 for score in scores)  # higher is better
        assert len(store.keyword_candidates(["docker"], 2)) == 2
        window = Filter(lower="2024-01-03 00:00:00")
        assert {label for label, _ in store.keyword_candidates(["docker"], 10, window)} == {
            labels[ids[2]],
            labels[ids[3]],
        }
        newest = max(docker)
        assert [label for label, _ in store.keyword_candidates(["docker"], 10, recent=1)] == [newest]
        bounded = store.keyword_candidates(["docker"], 10, window, label_range=(newest, newest))
        assert [label for label, _ in bounded] == [newest]
        assert store.keyword_candidates(['say "hi" OR body:x'], 10) == []  # a term is never FTS5 syntax


def test_a_match_quotes_every_term() -> None:
    assert fts_match(["gpt", 'a"b', "c++"]) == '"gpt" OR "a""b" OR "c++"'


def test_retrieval_names_no_index_table() -> None:
    # The schema is the indexer's; retrieval reaches it only through IndexReader.
    for source in Path(obsmem.retrieval.__file__).parent.glob("*.py"):
        assert "semantic_" not in source.read_text(encoding="utf-8"), source.name
