"""``Obsmem.search_stages``: the hybrid search the eval harness measures is ``memory_search`` itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from obsmem.errors import ValidationFailed
from obsmem.retrieval.hybrid import SearchPlan
from support.model_server import ModelServer, overlap_score
from support.semantic_service import add_memories, make_service

ITEMS = [
    (f"2024-03-{1 + i % 27:02d} 10:{i % 60:02d}", text)
    for i, text in enumerate(
        [
            "flaky login test fixed by mocking the clock",
            "deploy to arm64 runners failed on the docker layer cache",
            "postgres vacuum schedule moved to the night window",
            "billing ledger rename finished and the schema migration ran",
            "redis timeout raised retry count for the queue worker",
            "user prefers tabs over spaces in the linter config",
            "release tag 2.15 built the docker image twice",
            "login page shows a clock skew warning after deploy",
            "backup restore drill took forty minutes",
            "cron worker queue drained after the redis fix",
        ]
        * 3
    )
]
QUERIES = ["login clock", "docker deploy cache", "redis queue worker", "schema migration", "tabs"]


def reranked(tmp_path: Path, server, **reranker):  # noqa: ANN001, ANN201
    settings = {"provider": "http", "base_url": server.base_url, "model_id": "overlap"} | reranker
    return make_service(tmp_path, server, reranker=settings)


def test_default_plan_is_memory_search(tmp_path: Path, model_server: ModelServer) -> None:
    with make_service(tmp_path, model_server) as service:
        add_memories(service, "p", ITEMS)
        service.index("p")
        for query in QUERIES:
            result = service.search("p", query, limit=7)
            staged, stages = service.search_stages("p", query, limit=7)
            assert [h.memory_id for h in staged.hits] == [h.memory_id for h in result.hits]
            assert stages.final[:7] == [h.memory_id for h in result.hits]
            assert staged.truncated == result.truncated
            # the final ranking goes as deep as the fused candidates, one entry per memory
            assert len(stages.final) == len(set(stages.final)) == len(stages.fused)
            assert stages.bm25 is not None and stages.vector is not None
            assert set(stages.bm25) | set(stages.vector) <= set(stages.fused)  # 30 memories: nothing is cut
            assert stages.rerank_scores is None


def test_one_list_alone_is_that_list_in_its_own_order(tmp_path: Path, model_server: ModelServer) -> None:
    with make_service(tmp_path, model_server) as service:
        add_memories(service, "p", ITEMS)
        service.index("p")
        for query in QUERIES:
            _, both = service.search_stages("p", query)
            asked = len(model_server.texts_embedded())
            _, keyword = service.search_stages("p", query, SearchPlan(lists=("bm25",)))
            assert keyword.vector is None and keyword.final == keyword.fused == both.bm25
            assert len(model_server.texts_embedded()) == asked  # BM25 alone embeds nothing
        for query in QUERIES:
            _, both = service.search_stages("p", query)
            _, vector = service.search_stages("p", query, SearchPlan(lists=("vector",)))
            assert vector.bm25 is None and vector.final == both.vector


def test_rerank_scores_and_the_floor_switch(tmp_path: Path, model_server: ModelServer) -> None:
    with reranked(tmp_path, model_server, min_score=2) as service:
        add_memories(service, "p", ITEMS)
        service.index("p")
        query = "redis queue worker timeout"
        _, floored = service.search_stages("p", query)
        _, unfloored = service.search_stages("p", query, SearchPlan(floor=False))
        _, plain = service.search_stages("p", query, SearchPlan(rerank=False))
        assert unfloored.rerank_scores is not None and plain.rerank_scores is None
        assert unfloored.rerank_scores == sorted(unfloored.rerank_scores, reverse=True)
        # the floor keeps exactly the memories scoring at least min_score, in the same order
        kept = [m for m, s in zip(unfloored.final, unfloored.rerank_scores, strict=True) if s >= 2]
        assert floored.final == kept and 0 < len(kept) < len(unfloored.final)
        assert plain.final == plain.fused == unfloored.fused
        contents = {h.memory_id: h.content for h in service.search("p", query, limit=50).hits}
        for memory_id, score in zip(floored.final, floored.rerank_scores or [], strict=True):
            assert score == overlap_score(query, contents[memory_id])


def test_a_released_project_opens_again(tmp_path: Path, model_server: ModelServer) -> None:
    with make_service(tmp_path, model_server) as service:
        add_memories(service, "p", ITEMS)
        service.index("p")
        before = [h.memory_id for h in service.search("p", "login clock").hits]
        service.release("p")
        service.release("never-opened")  # nothing to do
        assert [h.memory_id for h in service.search("p", "login clock").hits] == before


def test_bad_plans_and_no_semantic_section(tmp_path: Path, service) -> None:  # noqa: ANN001
    with pytest.raises(ValueError):
        SearchPlan(lists=("bm25", "bm25"))
    with pytest.raises(ValueError):
        SearchPlan(lists=())
    service.append_events("p", "s1", [{"role": "user", "content": "x"}])
    with pytest.raises(ValidationFailed) as caught:
        service.search_stages("p", "x")
    assert caught.value.code == "mode_unavailable"
