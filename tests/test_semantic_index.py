"""Semantic index lifecycle on real SQLite files with the loopback embedding server."""

from __future__ import annotations

from pathlib import Path

import pytest

from obsmem.errors import IndexBuilding, ValidationFailed
from support.hybrid_reference import IN_STEP, index_matches_memories, reference_search
from support.model_server import ModelServer
from support.semantic_service import add_memories, corpus, make_service


def test_search_before_indexing_is_index_building(tmp_path: Path, model_server: ModelServer) -> None:
    with make_service(tmp_path, model_server) as service:
        assert service.default_mode == "hybrid"
        add_memories(service, "p", corpus(5))
        with pytest.raises(IndexBuilding) as caught:
            service.search("p", "auth clock")
        assert caught.value.status == 503
        assert caught.value.to_dict()["indexed_count"] == 0
        assert caught.value.to_dict()["source_count"] == 5
        # exact mode is still available on request
        assert service.search("p", "m3", mode="exact").mode == "exact"


def test_backfill_then_results_match_reference(tmp_path: Path, model_server: ModelServer) -> None:
    with make_service(tmp_path, model_server) as service:
        add_memories(service, "p", corpus(300))
        summary = service.index("p")
        assert summary.status.indexed_count == 300 and summary.status.source_count == 300
        assert summary.totals.chunks_embedded == 300
        status = service.status("p")
        assert status.indexed_count == 300 and status.source_count == 300
        db = service.database("p")
        settings = service.settings.semantic
        with db.read() as conn:
            assert index_matches_memories(conn, settings) == IN_STEP
        for query in (
            "flaky auth test",
            "postgres vacuum",
            "release docker image",
            "what did we do about redis?",
        ):
            result = service.search("p", query, limit=20)
            assert not result.partial
            with db.read() as conn:
                expected = reference_search(conn, settings, query)
            assert [hit.memory_id for hit in result.hits] == expected, query
            assert result.truncated  # 300 chunks: every list reached its budget of 100


def test_incremental_batches_embed_only_what_changed(tmp_path: Path, model_server: ModelServer) -> None:
    with make_service(tmp_path, model_server) as service:
        add_memories(service, "p", corpus(40))
        service.index("p")
        before = len(model_server.texts_embedded())
        add_memories(service, "p", corpus(45)[40:])
        summary = service.index("p")
        assert summary.totals.memories == 5 and summary.totals.chunks_embedded == 5
        assert len(model_server.texts_embedded()) - before == 5
        # Re-queueing unchanged memories reuses their stored embeddings.
        db = service.database("p")
        with db.write() as conn:
            conn.execute("INSERT INTO semantic_pending(memory_row) SELECT id FROM memories")
        summary = service.index("p")
        assert summary.totals.chunks_embedded == 0 and summary.totals.chunks_reused == 45


def test_partial_results_while_catching_up(tmp_path: Path, model_server: ModelServer) -> None:
    with make_service(tmp_path, model_server, index={"batch_chunks": 10}) as service:
        add_memories(service, "p", corpus(30))
        report = service.indexer.run_batch("p")
        assert report.memories == 10 and report.remaining == 20
        result = service.search("p", "auth login")
        assert result.partial
        assert 0 < len(result.hits) <= 10
        service.index("p")
        assert not service.search("p", "auth login").partial


def test_forget_hides_at_once_and_removes_derived_rows_next_batch(tmp_path: Path, model_server: ModelServer) -> None:
    with make_service(tmp_path, model_server) as service:
        ids = add_memories(service, "p", corpus(20))
        service.index("p")
        target = ids[4]
        content = service.recall("p", target).memory.content
        assert target in [h.memory_id for h in service.search("p", content).hits]
        deleted = service.forget("p", target[:12])
        assert deleted.deleted.memory_id == target
        result = service.search("p", content)
        assert target not in [h.memory_id for h in result.hits]
        assert result.partial  # the delete is pending in the index
        db = service.database("p")
        assert (
            db.query(
                "SELECT count(*) FROM semantic_chunks c JOIN semantic_sources s USING (memory_row)"
                " WHERE s.memory_id = ?",
                (target,),
            )[0][0]
            == 1
        )
        service.index("p")
        assert db.query("SELECT count(*) FROM semantic_sources WHERE memory_id = ?", (target,))[0][0] == 0
        with db.read() as conn:
            assert index_matches_memories(conn, service.settings.semantic)["stale"] == 0
        assert service.status("p").indexed_count == 19


def test_edited_memory_never_returns_from_stale_chunks(tmp_path: Path, model_server: ModelServer) -> None:
    with make_service(tmp_path, model_server) as service:
        ids = add_memories(service, "p", [("2024-01-01 10:00", "zebra quagga okapi"), ("2024-01-02 10:00", "auth")])
        service.index("p")
        db = service.database("p")
        with db.write() as conn:  # an edit made by another writer (e.g. a pipeline rewrite)
            conn.execute("UPDATE memories SET content = 'completely different words' WHERE memory_id = ?", (ids[0],))
        result = service.search("p", "zebra quagga okapi")
        assert ids[0] not in [h.memory_id for h in result.hits]
        service.index("p")
        hits = service.search("p", "completely different").hits
        assert hits[0].memory_id == ids[0] and hits[0].content == "completely different words"


def test_date_and_session_filters_have_no_omissions(tmp_path: Path, model_server: ModelServer) -> None:
    with make_service(tmp_path, model_server) as service:
        items = corpus(400)
        add_memories(service, "p", items[:300], session="s1")
        add_memories(service, "p", items[300:], session="s2")
        service.index("p")
        db = service.database("p")
        settings = service.settings.semantic
        cases = [
            {"after": "2024-03-01", "before": "2024-03-03"},
            {"after": "2024-02-10 05:00", "before": "2024-02-10 05:59"},
            {"after": "2024-01-01", "before": "2024-12-31"},
            {"session_id": "s2"},
            {"after": "2024-05-01", "session_id": "s1"},
        ]
        for case in cases:
            for query in ("auth clock mock", "docker image layer"):
                result = service.search("p", query, limit=50, **case)
                with db.read() as conn:
                    expected = reference_search(conn, settings, query, limit=50, **case)
                assert [h.memory_id for h in result.hits] == expected, case
                for hit in result.hits:
                    stamp = hit.date
                    if "after" in case:
                        assert stamp >= case["after"][:16]
                    if "session_id" in case:
                        assert hit.session_id == case["session_id"]


def test_small_budgets_admit_neighbours_like_the_reference(tmp_path: Path, model_server: ModelServer) -> None:
    # Lists of 5 chunks and a fused budget of 8: most chunks beside a candidate are not candidates, so they
    # enter through smoothing, are validated only once they reach the budget, and a window or session
    # keeps the ones outside it out.
    budgets = {"candidates_per_list": 5, "fused_candidates": 8}
    with make_service(tmp_path, model_server, fusion=budgets) as service:
        items = corpus(300)
        add_memories(service, "p", items[:200], session="s1")
        add_memories(service, "p", items[200:], session="s2")
        service.index("p")
        db = service.database("p")
        cases = [{}, {"after": "2024-03-01", "before": "2024-03-05"}, {"session_id": "s2"}]
        for case in cases:
            for query in ("auth clock mock", "docker image layer", "vacuum ledger"):
                result = service.search("p", query, limit=50, **case)
                with db.read() as conn:
                    expected = reference_search(conn, service.settings.semantic, query, limit=50, **case)
                assert [h.memory_id for h in result.hits] == expected, (case, query)


def test_changed_neighbours_never_enter_through_smoothing(tmp_path: Path, model_server: ModelServer) -> None:
    # One candidate per list: the strong match alone is a candidate and the memories before and after it
    # can only enter as its neighbours. An edited or forgotten neighbour (not yet re-indexed) must not.
    budgets = {"candidates_per_list": 1, "fused_candidates": 3}
    with make_service(tmp_path, model_server, fusion=budgets) as service:
        ids = add_memories(
            service,
            "p",
            [
                ("2024-01-01 10:00", "release tag branch"),
                ("2024-01-02 10:00", "zebra quagga okapi"),
                ("2024-01-03 10:00", "docker image layer"),
                ("2024-01-04 10:00", "cron backup restore"),
            ],
        )
        service.index("p")
        before, match, after = ids[0], ids[1], ids[2]
        assert {h.memory_id for h in service.search("p", "zebra quagga okapi").hits} == {before, match, after}
        with service.database("p").write() as conn:
            conn.execute("UPDATE memories SET content = 'changed words' WHERE memory_id = ?", (after,))
        assert [h.memory_id for h in service.search("p", "zebra quagga okapi").hits] == [match, before]
        service.forget("p", before)
        assert [h.memory_id for h in service.search("p", "zebra quagga okapi").hits] == [match]
        windowed = service.search("p", "zebra quagga okapi", after="2024-01-02", before="2024-01-04").hits
        assert [h.memory_id for h in windowed] == [match]


def test_graph_filter_path_for_large_windows(tmp_path: Path, model_server: ModelServer) -> None:
    # With a tiny exact-scan limit, wide windows go through the filtered graph search.
    with make_service(tmp_path, model_server, index={"exact_scan_max_chunks": 10}) as service:
        add_memories(service, "p", corpus(300))
        service.index("p")
        db = service.database("p")
        for case in ({"after": "2024-01-01", "before": "2024-06-30"}, {"before": "2024-01-05"}):
            result = service.search("p", "backup restore schema", limit=50, **case)
            with db.read() as conn:
                expected = reference_search(conn, service.settings.semantic, "backup restore schema", limit=50, **case)
            assert [h.memory_id for h in result.hits] == expected


def test_mode_exact_on_request_and_validation(tmp_path: Path, model_server: ModelServer) -> None:
    with make_service(tmp_path, model_server) as service:
        add_memories(service, "p", corpus(10))
        service.index("p")
        exact = service.search("p", "m7", mode="exact")
        assert exact.mode == "exact" and all("m7" in h.content for h in exact.hits)
        with pytest.raises(ValidationFailed):
            service.search("p", "x", mode="fuzzy")
        hybrid = service.search("p", 'gpt-4 c++ foo:bar "unbalanced what is this?')
        assert hybrid.mode == "hybrid"


def test_semantic_off_indexes_nothing(tmp_path: Path) -> None:
    from obsmem import Obsmem

    with Obsmem(data_dir=tmp_path) as service:
        assert service.default_mode == "exact"
        assert service.indexer is None
        service.append_events("p", "s1", [{"role": "user", "content": "x"}])
        with pytest.raises(ValidationFailed) as caught:
            service.search("p", "x", mode="hybrid")
        assert caught.value.code == "mode_unavailable"
        assert not (service.database("p").path.parent / "semantic").exists()


def test_another_indexer_makes_backfill_busy(tmp_path: Path, model_server: ModelServer) -> None:
    from obsmem.errors import IndexBusy
    from obsmem.indexer.project import INDEXING_LOCK

    with make_service(tmp_path, model_server) as service:
        add_memories(service, "p", corpus(5))
        index = service.indexer.project("p")
        with index.files.locked(INDEXING_LOCK):  # as another process running `obsmem index` would
            assert index.run_batch().busy
            with pytest.raises(IndexBusy) as caught:
                service.index("p")
            assert caught.value.code == "index_busy" and caught.value.status == 503
        assert service.index("p").status.indexed_count == 5
