"""Graph files: damage detected before load and rebuilt from stored embeddings; settings changes rebuild."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import hnswlib
import numpy as np
import pytest

from obsmem.errors import IndexBuilding, SemanticSettingsMismatch, StorageFull
from obsmem.indexer.hnsw_file import IndexFiles
from obsmem.indexer.project import GRAPH_PROBLEMS
from support.hybrid_reference import index_matches_memories, reference_search
from support.model_server import ModelServer
from support.semantic_service import add_memories, corpus, make_service

QUERIES = ("flaky auth test", "docker image release", "backup restore")


def graph_dir(service) -> Path:
    return service.database("p").path.parent / "semantic"


def graph_files(service) -> list[str]:
    return sorted(p.name for p in graph_dir(service).iterdir() if not p.name.startswith("."))


def damage(path: Path, how: str, tmp_path: Path) -> None:
    if how == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif how == "bit_flipped":
        data = bytearray(path.read_bytes())
        data[len(data) // 3] ^= 0x10
        path.write_bytes(bytes(data))
    elif how == "foreign":
        # A well-formed hnswlib file of another index, of the same size class: not ours.
        other = hnswlib.Index(space="ip", dim=128)
        other.init_index(max_elements=10)
        other.add_items(np.eye(10, 128, dtype=np.float32), np.arange(10))
        other.save_index(str(tmp_path / "foreign.bin"))
        shutil.copyfile(tmp_path / "foreign.bin", path)
    elif how == "deleted":
        path.unlink()


@pytest.mark.parametrize("how", ["truncated", "bit_flipped", "foreign", "deleted"])
def test_damaged_graph_file_is_detected_and_rebuilt(tmp_path: Path, model_server: ModelServer, how: str) -> None:
    data = tmp_path / "data"
    with make_service(data, model_server) as service:
        add_memories(service, "p", corpus(200))
        service.index("p")
        [name] = graph_files(service)
        state = service.indexer.project("p").state()
        assert state.hnsw_file == name and not state.dirty
    damage(data / "projects" / "p" / "semantic" / name, how, tmp_path)
    documents_before = len(model_server.texts_embedded())
    with make_service(data, model_server) as service:
        index = service.indexer.project("p")
        files = IndexFiles(graph_dir(service))
        assert files.verified_path(index.state()) is None  # detected before anything is loaded
        vectors = index.vectors()
        assert vectors is not None and vectors.graph is None  # the damaged file never reached hnswlib
        db = service.database("p")
        for query in QUERIES:  # exact scans serve correct results meanwhile
            with db.read() as conn:
                assert [h.memory_id for h in service.search("p", query).hits] == reference_search(
                    conn, service.settings.semantic, query
                )
        index.maintain()
        assert vectors.graph is not None
        state = index.state()
        assert graph_files(service) == [state.hnsw_file] and state.hnsw_file != name
        for query in QUERIES:
            with db.read() as conn:
                assert [h.memory_id for h in service.search("p", query).hits] == reference_search(
                    conn, service.settings.semantic, query
                )
    # Rebuilt from stored embeddings: the model only ever saw the queries (with a query whose words most
    # chunks hold, the query less those words too).
    asked = model_server.texts_embedded()[documents_before:]
    assert sum(text in QUERIES for text in asked) == 2 * len(QUERIES)
    assert all(any(set(text.split()) <= set(query.split()) for query in QUERIES) for text in asked)


def test_fresh_process_loads_verified_file(tmp_path: Path, model_server: ModelServer) -> None:
    with make_service(tmp_path, model_server) as service:
        add_memories(service, "p", corpus(120))
        service.index("p")
        add_memories(service, "p", corpus(130)[120:])  # committed after the file was published
        service.indexer.run_batch("p")
    with make_service(tmp_path, model_server) as service:
        [name] = graph_files(service)
        assert (graph_dir(service) / name).stat().st_mode & 0o077 == 0  # private, like the database
        vectors = service.indexer.project("p").vectors()
        assert vectors.graph is not None and vectors.live == 130 and vectors.graph_live == 130
        with service.database("p").read() as conn:
            expected = reference_search(conn, service.settings.semantic, "m125 cron")
        assert [h.memory_id for h in service.search("p", "m125 cron").hits] == expected


@pytest.mark.parametrize(
    "change",
    [{"chunk_bytes": 16, "overlap_bytes": 4}, {"max_lines": 3}, {"embedding": {"model_id": "another-model"}}],
)
def test_model_or_chunk_settings_change_rebuilds(tmp_path: Path, model_server: ModelServer, change) -> None:
    with make_service(tmp_path, model_server) as service:
        add_memories(service, "p", corpus(30))
        service.index("p")
        old_file = graph_files(service)
    with make_service(tmp_path, model_server, **change) as service:
        # The index built with the other settings stays until `obsmem index` adopts these.
        with pytest.raises(SemanticSettingsMismatch):
            service.search("p", "auth")
        summary = service.index("p")
        assert summary.totals.reset and summary.totals.chunks_embedded >= 30 and summary.totals.chunks_reused == 0
        assert graph_files(service) != old_file and len(graph_files(service)) == 1
        with service.database("p").read() as conn:
            assert index_matches_memories(conn, service.settings.semantic)["missing"] == 0
            assert index_matches_memories(conn, service.settings.semantic)["stale"] == 0
            expected = reference_search(conn, service.settings.semantic, "auth clock")
        assert [h.memory_id for h in service.search("p", "auth clock").hits] == expected


def test_tokenizer_change_rebuilds_only_keyword_table(tmp_path: Path, model_server: ModelServer) -> None:
    from obsmem.indexer.keywords import keyword_signature

    plain = {"tokenizer": "unicode61"}
    with make_service(tmp_path, model_server, bm25=plain) as service:
        add_memories(service, "p", [("2024-01-01 10:00", "running runners ran"), ("2024-01-02 10:00", "other")])
        service.index("p")
        db = service.database("p")
        assert db.query("SELECT count(*) FROM semantic_fts WHERE semantic_fts MATCH 'body:\"run\"'")[0][0] == 0
    embedded = len(model_server.texts_embedded())
    with make_service(tmp_path, model_server, bm25={"tokenizer": "porter unicode61"}) as service:
        summary = service.index("p")
        assert summary.totals.chunks_embedded == 0 and not summary.totals.reset
        assert len(model_server.texts_embedded()) == embedded
        db = service.database("p")
        signature = keyword_signature("porter unicode61", 300)
        assert db.query("SELECT fts_tokenizer FROM semantic_state")[0][0] == signature
        # Stemming now matches "run" against "running" (in the body; the next memory has it as context).
        assert db.query("SELECT count(*) FROM semantic_fts WHERE semantic_fts MATCH 'body:\"run\"'")[0][0] == 1
        assert db.query("SELECT count(*) FROM semantic_fts WHERE semantic_fts MATCH 'previous:\"run\"'")[0][0] == 1
        with db.read() as conn:
            assert index_matches_memories(conn, service.settings.semantic)["contexts_wrong"] == 0


def test_context_size_change_rebuilds_only_keyword_table(tmp_path: Path, model_server: ModelServer) -> None:
    with make_service(tmp_path, model_server) as service:
        add_memories(service, "p", [("2024-01-01 10:00", "alpha beta gamma delta"), ("2024-01-02 10:00", "other")])
        service.index("p")
    embedded = len(model_server.texts_embedded())
    with make_service(tmp_path, model_server, bm25={"context_characters": 10}) as service:
        summary = service.index("p")
        assert summary.totals.chunks_embedded == 0 and not summary.totals.reset
        assert len(model_server.texts_embedded()) == embedded
        db = service.database("p")
        # The last 10 characters, from a word start: "delta" only.
        assert db.query("SELECT count(*) FROM semantic_fts WHERE semantic_fts MATCH 'previous:\"delta\"'")[0][0] == 1
        assert db.query("SELECT count(*) FROM semantic_fts WHERE semantic_fts MATCH 'previous:\"gamma\"'")[0][0] == 0
        with db.read() as conn:
            assert index_matches_memories(conn, service.settings.semantic)["contexts_wrong"] == 0


def test_background_indexing_after_writes_and_deletes(tmp_path: Path, model_server: ModelServer) -> None:
    from obsmem import Obsmem
    from obsmem.settings import load_settings
    from support.semantic_service import semantic_settings

    settings = load_settings(
        data_dir=tmp_path,
        semantic=semantic_settings(model_server, index={"background": True, "poll_seconds": 0.2}),
    )
    with Obsmem(settings) as service:
        ids = add_memories(service, "p", corpus(50))

        def wait_for(predicate) -> None:
            deadline = time.monotonic() + 20
            while not predicate():
                assert time.monotonic() < deadline, "background indexing did not finish"
                time.sleep(0.05)

        wait_for(lambda: service.status("p").indexed_count == 50 and service.status("p").index.pending == 0)
        assert service.search("p", "auth clock").hits
        service.forget("p", ids[0])
        wait_for(lambda: service.status("p").index.pending == 0)
        assert service.database("p").query("SELECT count(*) FROM semantic_sources")[0][0] == 49
    # Started again, it finds work left by another process.
    with make_service(tmp_path, model_server) as other:
        add_memories(other, "p", corpus(55)[50:])
    with Obsmem(settings) as service:
        wait_for(lambda: service.status("p").indexed_count == 54 and service.status("p").index.pending == 0)


@pytest.mark.parametrize(
    ("how", "problem"), [("deleted", "missing"), ("bit_flipped", "damaged"), ("truncated", "damaged")]
)
def test_a_damaged_graph_file_is_logged_once_and_status_tells_the_truth(
    tmp_path: Path,
    model_server: ModelServer,
    how: str,
    problem: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    data = tmp_path / "data"
    items = corpus(80)
    with make_service(data, model_server) as service:
        add_memories(service, "p", items)
        service.index("p")
        [name] = graph_files(service)
        assert service.status("p").index.graph_file == "present"
        assert service.status("p").index.graph_rebuild is None
    damage(data / "projects" / "p" / "semantic" / name, how, tmp_path)
    caplog.set_level(logging.WARNING, logger="obsmem.indexer")
    with make_service(data, model_server) as service:
        index = service.indexer.project("p")
        assert service.status("p").index.graph_file == problem  # before anything loads it
        index.vectors()  # detected at load: the graph is not used
        service.search("p", QUERIES[0])
        index.maintain()  # detected again, rebuilt and published
        index.maintain()
        status = service.status("p").index
        assert status.graph_file == "present" and status.graph is True
        assert status.graph_rebuild["reason"] == GRAPH_PROBLEMS[problem]
    warnings = [record.getMessage() for record in caplog.records if record.name == "obsmem.indexer"]
    assert len(warnings) == 1, warnings
    assert GRAPH_PROBLEMS[problem] in warnings[0] and "project p" in warnings[0]
    assert not any(content in warnings[0] for _, content in items)  # no memory text


class ShortWrites:
    """An hnswlib index whose ``save_index`` stops after ``keep`` bytes and reports nothing, as hnswlib's does on
    a full disk (it checks none of its writes): the one thing of a full disk that cannot be had here cheaply."""

    def __init__(self, graph: hnswlib.Index, keep: int) -> None:
        self._graph = graph
        self._keep = keep

    def save_index(self, path: str) -> None:
        self._graph.save_index(path)
        with open(path, "rb+") as handle:
            handle.truncate(self._keep)

    def __getattr__(self, name: str):
        return getattr(self._graph, name)


def test_a_graph_file_written_short_is_never_published(tmp_path: Path, model_server: ModelServer) -> None:
    """A graph file cut short by a full disk was recorded as whole (its size and checksum taken from the short
    file), `obsmem index` succeeded with the file `present`, and every process handed it to hnswlib at load."""
    data = tmp_path / "data"
    with make_service(data, model_server) as service:
        add_memories(service, "p", corpus(120))
        service.index("p")
        index = service.indexer.project("p")
        [name] = graph_files(service)
        before = index.state()
        graph = index.vectors().graph
        with pytest.raises(StorageFull):
            index.files.publish(service.database("p"), ShortWrites(graph, 4096), version=before.version + 1)
        assert graph_files(service) == [name]  # nothing short is left, nothing new is recorded
        state = index.state()
        assert state.dirty and state.hnsw_file == name and state.hnsw_checksum == before.hnsw_checksum
        for query in QUERIES:  # the graph in memory still serves
            with service.database("p").read() as conn:
                assert [h.memory_id for h in service.search("p", query).hits] == reference_search(
                    conn, service.settings.semantic, query
                )
    with make_service(data, model_server) as service:  # space again: the next run publishes a whole file
        service.index("p")
        state = service.indexer.project("p").state()
        assert not state.dirty and graph_files(service) == [state.hnsw_file]
        assert service.status("p").index.graph_file == "present"
        assert service.indexer.project("p").vectors().graph is not None


def damage_vectors(path: Path, how: str, *, newest: bool = False) -> None:
    """Damage the stored vectors in the database file itself (memories untouched): the first vector, or the
    newest one."""
    import apsw

    conn = apsw.Connection(str(path))
    with conn:
        first = conn.execute(f"SELECT {'max' if newest else 'min'}(chunk) FROM semantic_vectors").fetchone()[0]
        if how == "cut_short":
            conn.execute("UPDATE semantic_vectors SET embedding = substr(embedding, 1, 10) WHERE chunk = ?", (first,))
        elif how == "text":
            conn.execute("UPDATE semantic_vectors SET embedding = 'not a vector' WHERE chunk = ?", (first,))
        elif how == "missing":
            conn.execute("DELETE FROM semantic_vectors WHERE chunk = ?", (first,))
        elif how == "dimensions":
            conn.execute("UPDATE semantic_state SET dimensions = dimensions + 3 WHERE id = 1")
        elif how == "dimensions_text":
            conn.execute("UPDATE semantic_state SET dimensions = 'many' WHERE id = 1")
    conn.close()


@pytest.mark.parametrize("how", ["cut_short", "text", "missing", "dimensions", "dimensions_text"])
@pytest.mark.parametrize("first", ["search", "index"])
def test_damaged_stored_vectors_reset_the_index_and_index_rebuilds_it(
    tmp_path: Path, model_server: ModelServer, how: str, first: str
) -> None:
    data = tmp_path / "data"
    with make_service(data, model_server) as service:
        add_memories(service, "p", corpus(60))
        service.index("p")
        db_path = Path(service.database("p").path)
        memories = service.database("p").query("SELECT memory_id, content FROM memories ORDER BY id")
    damage_vectors(db_path, how)
    with make_service(data, model_server) as service:
        if first == "search":
            with pytest.raises(IndexBuilding) as caught:  # a stable error, not a ValueError/TypeError
                service.search("p", "auth clock")
            assert caught.value.to_dict()["indexed_count"] == 0
            with pytest.raises(IndexBuilding):  # and again until something rebuilds it
                service.search("p", "auth clock")
        summary = service.index("p")
        assert summary.totals.chunks_embedded >= 60
        assert_rebuilt_whole(service, memories)


def assert_rebuilt_whole(service, memories: list[tuple]) -> None:
    """The index of ``p`` was rebuilt from its memories, which are as they were, and search answers from it."""
    db = service.database("p")
    assert db.query("SELECT memory_id, content FROM memories ORDER BY id") == memories  # canonical untouched
    with db.read() as conn:
        assert index_matches_memories(conn, service.settings.semantic)["missing"] == 0
        expected = reference_search(conn, service.settings.semantic, "auth clock")
    assert [h.memory_id for h in service.search("p", "auth clock").hits] == expected
    state = service.indexer.project("p").state()
    assert isinstance(state.dimensions, int) and graph_files(service) == [state.hnsw_file]


def drain(service) -> None:
    """Run ``p``'s batches as the background indexer does, one at a time, then its maintenance."""
    while service.indexer.run_batch("p").remaining:
        pass
    service.indexer.project("p").maintain()


@pytest.mark.parametrize("how", ["cut_short", "text", "missing", "dimensions", "dimensions_text"])
def test_damaged_stored_vectors_are_found_before_a_background_batch(
    tmp_path: Path, model_server: ModelServer, how: str
) -> None:
    """A server's batches checked nothing: they wrote beside damaged vectors (an edited size failed every one
    of them as embedding_unavailable, for good) until a search happened to load them."""
    data = tmp_path / "data"
    items = corpus(65)
    with make_service(data, model_server) as service:
        add_memories(service, "p", items[:60])
        service.index("p")
        db_path = Path(service.database("p").path)
    damage_vectors(db_path, how)
    with make_service(data, model_server) as service:
        add_memories(service, "p", items[60:])  # a server's next batch: five new memories
        report = service.indexer.run_batch("p")
        assert report.reset and report.memories + report.remaining == 65  # found first: every memory queued again
        drain(service)
        memories = service.database("p").query("SELECT memory_id, content FROM memories ORDER BY id")
        assert len(memories) == 65
        assert_rebuilt_whole(service, memories)


@pytest.mark.parametrize("how", ["missing", "cut_short"])
def test_vectors_held_in_memory_catch_up_only_with_whole_vectors(
    tmp_path: Path, model_server: ModelServer, how: str
) -> None:
    """A process holding the vectors catches up with what another one committed since: a new chunk whose
    vector row was gone was skipped silently, never searched nor repaired."""
    data = tmp_path / "data"
    items = corpus(65)
    with make_service(data, model_server) as serving:
        add_memories(serving, "p", items[:60])
        serving.index("p")
        assert serving.search("p", "auth clock").hits  # the vectors are held in memory now
        with make_service(data, model_server) as other:  # another process's batch indexes five more
            add_memories(other, "p", items[60:])
            assert other.indexer.run_batch("p").remaining == 0  # (no graph published: no full reload follows)
        damage_vectors(Path(serving.database("p").path), how, newest=True)
        with pytest.raises(IndexBuilding):  # the catch-up refuses them and resets the index
            serving.search("p", "auth clock")
        drain(serving)
        memories = serving.database("p").query("SELECT memory_id, content FROM memories ORDER BY id")
        assert len(memories) == 65
        assert_rebuilt_whole(serving, memories)


@pytest.mark.parametrize("how", ["dimensions", "dimensions_text"])
def test_an_edited_vector_size_is_found_by_the_next_batch_of_a_process_holding_the_vectors(
    tmp_path: Path, model_server: ModelServer, how: str
) -> None:
    """The vectors held in memory at the state's version were taken as current whatever size the state now
    gave, so every later batch failed as embedding_unavailable, for good."""
    data = tmp_path / "data"
    items = corpus(65)
    with make_service(data, model_server) as serving:
        add_memories(serving, "p", items[:60])
        serving.index("p")
        assert serving.search("p", "auth clock").hits  # the vectors are held in memory now
        damage_vectors(Path(serving.database("p").path), how)
        add_memories(serving, "p", items[60:])
        report = serving.indexer.run_batch("p")
        assert report.reset and report.memories + report.remaining == 65
        drain(serving)
        memories = serving.database("p").query("SELECT memory_id, content FROM memories ORDER BY id")
        assert_rebuilt_whole(serving, memories)
