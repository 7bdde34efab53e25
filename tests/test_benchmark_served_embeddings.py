"""The latency benchmarks time searches "excluding the query embedding" by serving embeddings made
beforehand (``benchmarks/semantic_query.py``, ``served_from``): a search whose question was not given
falls back to the model, and the benchmarks report how many timed searches did so."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from semantic_query import served_from, unserved  # noqa: E402

from obsmem.indexer.embedders import make_embedder  # noqa: E402
from obsmem.settings import EmbeddingSettings  # noqa: E402


def test_served_questions_skip_the_model_and_the_others_are_counted() -> None:
    embedder = make_embedder(EmbeddingSettings())
    size = embedder.embed_query("a first question loads the model").shape[0]
    marker = np.full(size, 0.5, dtype=np.float32)  # no model makes this vector
    given = {"where did we deploy": marker, "where did we deploy without": marker * 2}
    methods = (embedder.embed_query, embedder.embed_queries)
    with served_from(embedder, given) as missed:
        served = embedder.embed_queries(["where did we deploy", "where did we deploy without"])
        alone = embedder.embed_query("where did we deploy")
        fallback = embedder.embed_queries(["which port is the api on", "where did we deploy"])
    assert np.array_equal(served[0], marker) and np.array_equal(served[1], marker * 2)
    assert np.array_equal(alone, marker)
    assert fallback.shape == (2, size)
    assert not np.array_equal(fallback[1], marker)  # the whole batch went to the model
    assert abs(float(np.linalg.norm(fallback[0])) - 1.0) < 1e-3
    assert missed == [["which port is the api on", "where did we deploy"]]
    assert unserved(missed, ["which port is the api on"]) == 1
    assert unserved(missed, ["where did we deploy"]) == 0  # it was the batch's second text, not its question
    assert (embedder.embed_query, embedder.embed_queries) == methods
