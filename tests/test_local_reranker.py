"""The local cross-encoder reranker end to end, with a tiny model built here (nothing is downloaded).

The model is a randomly initialised one-layer BERT with a word-level vocabulary, saved as a
sentence-transformers ``CrossEncoder`` directory. Its scores mean nothing, but they are deterministic, so
the test can compute what the product must return: the fused candidates reordered by the model's own
scores, a floor dropping the ones below it, and the eval harness reporting ``hybrid+rerank``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from obsmem import Obsmem
from obsmem.errors import RerankerUnavailable
from obsmem.eval.runner import evaluate_questions
from obsmem.eval.suites.labelled import LabelledQuestion
from obsmem.settings import load_settings
from support.model_server import ModelServer
from support.semantic_service import add_memories, semantic_settings

MEMORIES = [
    "login test flaky because the session clock mock drifts",
    "billing export slow: one query per invoice row in the serializer",
    "retry policy backoff capped at thirty seconds after the outage",
    "schema migration must not lock the payments table in production",
    "cart page slow until the serializer prefetched line items",
    "decided to pin the http client below version three",
]
WORDS = sorted({word for text in MEMORIES for word in text.replace(":", " ").split()} | {"why", "what", "is"})


def build_cross_encoder(directory: Path) -> Path:
    """A tiny random BERT cross-encoder (one output) saved where ``CrossEncoder`` can load it offline."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from sentence_transformers import CrossEncoder

    torch.manual_seed(7)
    vocab = directory / "vocab.txt"
    directory.mkdir(parents=True)
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n", encoding="utf-8")
    tokenizer = transformers.BertTokenizer(str(vocab), do_lower_case=True)
    config = transformers.BertConfig(
        vocab_size=len(WORDS) + 5,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=1,
    )
    model = transformers.BertForSequenceClassification(config)
    model.eval()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    # Loading it back proves the directory is complete without any network access.
    CrossEncoder(str(directory), device="cpu", local_files_only=True)
    return directory


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_cross_encoder(tmp_path_factory.mktemp("models") / "tiny-cross-encoder")


def local_settings(tmp_path: Path, server: ModelServer, model: Path, **reranker: object):  # noqa: ANN201
    section = semantic_settings(server, reranker={"provider": "local", "model": str(model), **reranker})
    return load_settings(data_dir=tmp_path / "data", semantic=section)


def model_scores(model: Path, query: str, documents: list[str]) -> list[float]:
    from sentence_transformers import CrossEncoder

    encoder = CrossEncoder(str(model), device="cpu", local_files_only=True)
    return [float(s) for s in encoder.predict([(query, doc) for doc in documents], show_progress_bar=False)]


def test_search_reorders_by_the_local_model_and_applies_its_floor(
    tmp_path: Path, model_server: ModelServer, cross_encoder: Path
) -> None:
    query = "why was the cart page slow"
    settings = local_settings(tmp_path, model_server, cross_encoder)
    with Obsmem(settings, background_indexing=False) as memory:
        ids = add_memories(memory, "p", [(f"2024-05-0{1 + i} 12:00", text) for i, text in enumerate(MEMORIES)])
        memory.index("p")
        result = memory.search("p", query, mode="hybrid", limit=10)
    scores = dict(zip(ids, model_scores(cross_encoder, query, MEMORIES), strict=True))
    got = [hit.memory_id for hit in result.hits]
    assert got and set(got) <= set(ids)
    # Every returned memory in the model's order (one chunk per memory, so its score is the memory's).
    assert [scores[m] for m in got] == sorted((scores[m] for m in got), reverse=True)
    # A floor between two of those scores drops exactly the ones below it.
    ranked = sorted((scores[m] for m in got), reverse=True)
    assert len(ranked) >= 2 and ranked[0] > ranked[-1]
    floor = (ranked[0] + ranked[-1]) / 2
    floored = local_settings(tmp_path, model_server, cross_encoder, min_score=floor)
    with Obsmem(floored, background_indexing=False) as memory:
        kept = [hit.memory_id for hit in memory.search("p", query, mode="hybrid", limit=10).hits]
    assert kept == [m for m in got if scores[m] >= floor]


def test_eval_reports_hybrid_rerank_with_the_local_model(
    tmp_path: Path, model_server: ModelServer, cross_encoder: Path
) -> None:
    settings = local_settings(tmp_path, model_server, cross_encoder)
    with Obsmem(settings, background_indexing=False) as memory:
        ids = add_memories(memory, "p", [(f"2024-05-0{1 + i} 12:00", text) for i, text in enumerate(MEMORIES)])
    questions = [
        LabelledQuestion("q1", "positive", "what made the cart page slow", ids[4], split="held_out"),
        LabelledQuestion("q2", "positive", "retry backoff cap", ids[2], split="held_out"),
    ]
    run = evaluate_questions(settings, modes=("hybrid", "hybrid+rerank"), questions=questions, project="p")
    modes = {result.mode: result for result in run.results}
    assert set(modes) == {"hybrid", "hybrid+rerank"}
    assert modes["hybrid+rerank"].questions == 2
    assert 0.0 <= modes["hybrid+rerank"].metrics["hit@10"] <= 1.0
    assert run.setup["reranker"] == {"provider": "local", "min_score": None}


def test_a_directory_that_is_not_a_model_is_reranker_unavailable(tmp_path: Path, model_server: ModelServer) -> None:
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    settings = local_settings(tmp_path, model_server, empty)
    with Obsmem(settings, background_indexing=False) as memory:
        add_memories(memory, "p", [("2024-05-01 12:00", MEMORIES[0])])
        memory.index("p")
        with pytest.raises(RerankerUnavailable) as caught:
            memory.search("p", "login clock", mode="hybrid")
    assert "cannot load the local reranker" in caught.value.message and str(empty) not in caught.value.message
