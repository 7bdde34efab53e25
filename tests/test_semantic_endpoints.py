"""OpenAI-compatible embedding and rerank endpoints on loopback: correct use and every failure visible."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from obsmem.errors import EmbeddingUnavailable, RerankerUnavailable
from obsmem.indexer.embed_openai import parse_embeddings_reply
from obsmem.retrieval.rerank import parse_rerank_reply, rerank_order
from support.model_server import ModelServer
from support.semantic_service import add_memories, corpus, make_service, service_on

FAILURES = [
    "slow",
    "drip",
    "500",
    "malformed",
    "wrong_dimensions",
    "nan",
    "zero",
    "missing_item",
    "bad_index",
    "strings",
    "no_data",
]


def derived_rows(service) -> tuple[int, int, int]:
    db = service.database("p")
    return (
        db.query("SELECT count(*) FROM semantic_chunks")[0][0],
        db.query("SELECT count(*) FROM semantic_vectors")[0][0],
        # Memory markers: event markers (negated rows) wait for semantic.index.events, off here.
        db.query("SELECT count(*) FROM semantic_pending WHERE memory_row > 0")[0][0],
    )


def test_embedding_requests_are_well_formed(tmp_path: Path, model_server: ModelServer, monkeypatch) -> None:
    monkeypatch.setenv("OBSMEM_EMBEDDING_API_KEY", "sk-test-key-123456")
    with make_service(tmp_path, model_server, embedding={"query_prefix": "search_query:"}) as service:
        add_memories(service, "p", corpus(20))
        service.index("p")
        service.search("p", "auth clock")
    embedding_requests = [r for r in model_server.requests if r["path"] == "/v1/embeddings"]
    assert all(r["body"]["model"] == "hashed-words" for r in embedding_requests)
    assert all(r["body"]["encoding_format"] == "float" for r in embedding_requests)
    assert all(r["auth"] == "Bearer sk-test-key-123456" for r in embedding_requests)
    assert all(len(r["body"]["input"]) <= 16 for r in embedding_requests)  # batch_size
    documents = [t for r in embedding_requests[:-1] for t in r["body"]["input"]]
    assert sorted(documents) == sorted(text for _, text in corpus(20))  # no prefix on documents
    assert embedding_requests[-1]["body"]["input"] == ["search_query: auth clock"]


@pytest.mark.parametrize("behaviour", FAILURES)
def test_bad_embedding_replies_store_nothing(tmp_path: Path, model_server: ModelServer, behaviour: str) -> None:
    with make_service(tmp_path, model_server) as service:
        add_memories(service, "p", corpus(10))
        service.index("p")
        add_memories(service, "p", corpus(14)[10:])
        before = derived_rows(service)
        model_server.behaviour = behaviour
        started = time.monotonic()
        with pytest.raises(EmbeddingUnavailable) as caught:
            service.indexer.run_batch("p")
        assert time.monotonic() - started < 4.0  # the 2 s overall deadline holds, even when drip-fed
        assert caught.value.status == 503 and caught.value.code == "embedding_unavailable"
        assert "secret" not in caught.value.message and "m11" not in caught.value.message
        assert derived_rows(service) == before  # nothing stored from a bad reply
        with pytest.raises(EmbeddingUnavailable):
            service.search("p", "auth clock")  # no silent fallback to exact or BM25-only
        model_server.behaviour = "ok"
        service.index("p")
        assert derived_rows(service)[2] == 0


def test_unreachable_embedding_endpoint(tmp_path: Path, model_server: ModelServer) -> None:
    with make_service(tmp_path, model_server) as service:
        add_memories(service, "p", corpus(3))
        model_server.stop()
        with pytest.raises(EmbeddingUnavailable) as caught:
            service.index("p")
        assert "cannot reach" in caught.value.message


def reranked_service(tmp_path: Path, server, rerank_server=None, **reranker: Any):
    """Embeddings from ``server``; reranking by ``rerank_server`` (default: the same) with word overlap."""
    base_url = (rerank_server or server).base_url
    settings = {"provider": "http", "base_url": base_url, "model_id": "overlap", "timeout_seconds": 2.0}
    return make_service(tmp_path, server, reranker=settings | reranker)


@pytest.mark.parametrize("shape", ["results", "data", "list", "scores"])
def test_rerank_shapes_and_order(tmp_path: Path, model_server: ModelServer, shape: str) -> None:
    model_server.shape = shape
    items = [
        ("2024-01-01 10:00", "alpha beta gamma"),
        ("2024-01-02 10:00", "alpha beta"),
        ("2024-01-03 10:00", "alpha"),
        ("2024-01-04 10:00", "delta epsilon"),
    ]
    with reranked_service(tmp_path, model_server, batch_size=2) as service:
        ids = add_memories(service, "p", items)
        service.index("p")
        hits = service.search("p", "alpha beta gamma").hits
        assert [h.memory_id for h in hits[:3]] == ids[:3]  # by overlap score: 3, 2, 1
        rerank_requests = [r for r in model_server.requests if r["path"] == "/v1/rerank"]
        assert rerank_requests and all(len(r["body"]["documents"]) <= 2 for r in rerank_requests)
        assert all(r["body"]["query"] == "alpha beta gamma" for r in rerank_requests)


def test_rerank_min_score_floor_and_document_cut(tmp_path: Path, model_server: ModelServer) -> None:
    items = [
        ("2024-01-01 10:00", "alpha beta gamma"),
        ("2024-01-02 10:00", "alpha zzz"),
        ("2024-01-03 10:00", "unrelated words here"),
    ]
    with reranked_service(tmp_path, model_server, min_score=2, document_characters=11) as service:
        ids = add_memories(service, "p", items)
        service.index("p")
        hits = service.search("p", "alpha beta gamma").hits
        # "alpha beta gamma" cut to 11 characters is "alpha beta " (score 2, kept); the others score < 2.
        assert [h.memory_id for h in hits] == [ids[0]]
        documents = [d for r in model_server.requests if r["path"] == "/v1/rerank" for d in r["body"]["documents"]]
        assert max(len(d) for d in documents) <= 11


@pytest.mark.parametrize("behaviour", ["slow", "drip", "500", "malformed", "nan", "bad_index", "missing_item"])
def test_bad_rerank_replies_are_visible(tmp_path: Path, model_server: ModelServer, behaviour: str) -> None:
    reranker = ModelServer()  # its own server, so only the reranker misbehaves
    try:
        with reranked_service(tmp_path, model_server, reranker) as service:
            add_memories(service, "p", corpus(10))
            service.index("p")
            reranker.behaviour = behaviour
            with pytest.raises(RerankerUnavailable) as caught:
                service.search("p", "auth clock")  # never results without the configured reranker
            assert caught.value.status == 503 and "secret" not in caught.value.message
    finally:
        reranker.stop()


def test_ties_keep_fused_order() -> None:
    assert rerank_order([1.0, 2.0, 1.0, 2.0], None) == [1, 3, 0, 2]
    assert rerank_order([1.0, 2.0, 1.0, -4.0], -1.0) == [1, 0, 2]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["data", "results", "scores", "index", "embedding", "relevance_score", "score"]),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@given(json_values, st.integers(min_value=1, max_value=4))
def test_reply_parsers_reject_anything_malformed_with_their_code(reply: Any, count: int) -> None:
    for parse, error in (
        (parse_embeddings_reply, EmbeddingUnavailable),
        (parse_rerank_reply, RerankerUnavailable),
    ):
        try:
            parsed = parse(reply, count)
        except error:
            continue
        assert len(parsed) == count


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_query_embedding_of_another_size_than_the_index_is_embedding_unavailable(
    tmp_path: Path, model_server: ModelServer, backend: str, request: pytest.FixtureRequest
) -> None:
    """The endpoint serves another model under the same name after a restart: the new process learns the size
    of the vectors from its first reply, the query's, so only the index can tell. The search failed with a
    bare ValueError of the vector maths (SQLite) or pgvector's DataException (PostgreSQL): a 500."""
    dsn = request.getfixturevalue("postgres_dsn") if backend == "postgres" else None
    with service_on(tmp_path, model_server, dsn) as service:
        add_memories(service, "p", corpus(30))
        service.index("p")
    model_server.dimensions = 64
    with service_on(tmp_path, model_server, dsn) as service:
        with pytest.raises(EmbeddingUnavailable) as caught:
            service.search("p", "auth clock")
        assert caught.value.status == 503
        assert caught.value.message == (
            "the embedding model returned 64-dimensional vectors; the index holds 128-dimensional ones"
        )
        assert service.search("p", "auth clock", mode="exact").mode == "exact"
    model_server.dimensions = 128
    with service_on(tmp_path, model_server, dsn) as service:
        assert service.search("p", "auth clock").hits
