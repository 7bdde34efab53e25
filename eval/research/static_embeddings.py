"""Do the static embedding models whose weights ship inside a wheel rank memories as well as the bundled model?

A study tool, not part of the product. Two packages on the package index carry a static embedding model
(one vector per token, a text's vector their mean: no transformer runs) with its weights inside the wheel:
``wordllama`` (token vectors distilled from a large language model's embedding table, a 32,000-token
vocabulary, 256 dimensions) and ``tokenlearn-static-model`` (a model2vec-style model: a 276,000-token
vocabulary mapped onto 10,000 int8 vectors of 64 dimensions, with a weight per token). Neither is a
sentence-transformers directory, so this script builds one from the installed package's own files (a
``StaticEmbedding`` module: the same tokenizer, the same table, the same mean), checks that its vectors are
the package's own (cosine over the set's memories), and points ``[semantic.embedding] model`` at it with
``encoder = "torch-fp32"``: the product's eval harness then indexes and searches with it as it would with
any local model. ``bundled`` runs the default configuration (all-MiniLM-L6-v2, ``onnx-fp32``) the same way::

    python eval/research/static_embeddings.py --model wordllama --set coding
    python eval/research/static_embeddings.py --model bundled --set coding

The packages are not dependencies of obsmem: install them beside it to run this (``pip install --target DIR
wordllama==0.4.0.post1 tokenlearn-static-model==0.1.1 toml --no-deps`` and DIR on ``PYTHONPATH``; their
other requirements, numpy, tokenizers, safetensors, pydantic and requests, obsmem has already). It prints,
as JSON: the installed package's size, the agreement of the built directory with the package's own encoder,
encoding speed through the product's embedder on one thread (the set's memories as documents, its
questions one at a time as queries: documents per second and the query's p50), and each mode's hit@1/5/10
overall and per split and kind, with its search p50. The figures are in docs/eval.md ("A better local
model?").

``--blend WEIGHT`` asks a second question: can a static model's cosine, cheap enough to compute for every
candidate of every search, help the bundled model's hybrid ranking as one more signal? It runs the default
configuration with a study reranker over the first ``--depth`` fused candidates: ``WEIGHT`` times the
z-score of the static model's cosine (question to candidate) among them, minus ``--spacing`` per fused
position (the fused order as a prior, as ``late_interaction.py`` blends its MaxSim), so ``hybrid`` and
``hybrid+rerank`` come from one index in one run::

    python eval/research/static_embeddings.py --model wordllama --blend 0.5 --set coding-calibration
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

from obsmem.eval.datasets.question_sets import question_set
from obsmem.eval.runner import evaluate_questions
from obsmem.indexer.embedders import make_embedder
from obsmem.retrieval import rerank
from obsmem.retrieval.rerank import Reranker
from obsmem.settings import EmbeddingSettings, RerankerSettings, load_settings

STUDY_MODEL = "static-blend"  # the [semantic.reranker] model name the blend answers for
MODES = ("vector", "hybrid")
CUTS = (1, 5, 10)
MODELS = ("bundled", "wordllama", "tokenlearn-static-model")

Encode = Callable[[list[str]], np.ndarray]


def package_size_mb(module: Any) -> float:
    """The installed package's files, in MB (its folder: code, weights and tokenizer)."""
    folder = Path(module.__file__).parent
    return round(sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) / 1e6, 1)


def wordllama_model() -> tuple[Any, Any, Encode, float]:
    """wordllama's table and tokenizer as the wheel ships them, and its own encoder.

    ``WordLlama.load()`` looks for the shipped tokenizer under ``tokenizer/`` while the wheel has it under
    ``tokenizers/``, so as installed it tries to download the file; pointing its cache at the package's own
    folder finds both files there, and ``disable_download`` makes sure nothing is fetched.
    """
    import wordllama
    from tokenizers import Tokenizer
    from wordllama import WordLlama

    folder = Path(wordllama.__file__).parent
    model = WordLlama.load(cache_dir=folder, disable_download=True)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizers" / "l2_supercat_tokenizer_config.json"))

    def own(texts: list[str]) -> np.ndarray:
        return np.asarray(model.embed(texts, norm=True))

    return tokenizer, model.embedding, own, package_size_mb(wordllama)


def tokenlearn_model() -> tuple[Any, Any, Encode, float]:
    """tokenlearn-static-model's files as the wheel ships them (model2vec's layout, which sentence-transformers
    reads: its loader folds the token-to-vector mapping and the per-token weights into one row per token),
    and the package's own Rust encoder."""
    import static_model
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding

    folder = Path(static_model.__file__).parent / "model"
    module = StaticEmbedding.load(str(folder), local_files_only=True)

    def own(texts: list[str]) -> np.ndarray:
        return np.asarray(static_model.get_embeddings(texts), dtype=np.float32)

    return module.tokenizer, module.embedding.weight.detach().numpy(), own, package_size_mb(static_model)


CANDIDATES = {"wordllama": wordllama_model, "tokenlearn-static-model": tokenlearn_model}


def build_directory(tokenizer: Any, table: Any, directory: Path) -> None:
    """A sentence-transformers directory whose one module is the static table: the mean of the text's token
    vectors, no special tokens, as both packages compute it."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding

    module = StaticEmbedding(tokenizer, embedding_weights=np.asarray(table, dtype=np.float32))
    SentenceTransformer(modules=[module], device="cpu").save(str(directory))


def agreement(embedding: EmbeddingSettings, own: Encode, texts: list[str]) -> dict[str, float]:
    """Cosine of the product's vectors (built directory, whole texts) to the package's own, per text."""
    whole = embedding.model_copy(update={"sentences": "whole"})
    ours = np.asarray(make_embedder(whole).embed_documents(texts))
    theirs = own(texts)
    theirs = theirs / np.linalg.norm(theirs, axis=1, keepdims=True)
    cosines = np.sum(ours * theirs, axis=1)
    return {"mean": round(float(cosines.mean()), 6), "min": round(float(cosines.min()), 6)}


def speed(embedding: EmbeddingSettings, documents: list[str], queries: list[str]) -> dict[str, float]:
    """Documents per second and a query's p50 through the product's embedder, one thread for both."""
    embedder = make_embedder(embedding.model_copy(update={"threads": 1}))
    embedder.embed_documents(documents[:8])  # load and warm up
    started = time.perf_counter()
    embedder.embed_documents(documents)
    documents_per_s = len(documents) / (time.perf_counter() - started)
    latencies = []
    for query in queries:
        started = time.perf_counter()
        embedder.embed_query(query)
        latencies.append(1000.0 * (time.perf_counter() - started))
    return {"documents_per_s": round(documents_per_s, 1), "query_p50_ms": round(statistics.median(latencies), 2)}


class StaticBlend(Reranker):
    """A static model's cosine, blended with the fused order, for the first ``depth`` candidates."""

    def __init__(
        self, settings: RerankerSettings, *, encode: Encode, weight: float, depth: int, spacing: float
    ) -> None:
        super().__init__(settings)
        self.encode, self.weight, self.depth, self.spacing = encode, weight, depth, spacing

    def score_batches(self, query: str, batches: list[list[str]]) -> list[list[float]]:
        documents = [document for batch in batches for document in batch]
        scores = [-1000.0 - position for position in range(len(documents))]  # below the head, in fused order
        head = min(self.depth, len(documents))
        if head:
            vectors = self.encode([query, *documents[:head]])
            vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
            cosines = vectors[1:] @ vectors[0]
            z = (cosines - cosines.mean()) / (cosines.std() + 1e-9)
            for position in range(head):
                scores[position] = self.weight * float(z[position]) - self.spacing * position
        shaped, start = [], 0
        for batch in batches:
            shaped.append(scores[start : start + len(batch)])
            start += len(batch)
        return shaped


def blended(args: argparse.Namespace) -> dict[str, Any]:
    """The default configuration's hybrid ranking with and without the static model's cosine blended in."""
    _tokenizer, _table, own, _size = CANDIDATES[args.model]()
    settings = load_settings(semantic={"reranker": {"provider": "local", "model": STUDY_MODEL}})
    real = rerank.make_reranker

    def study_reranker(config: RerankerSettings | None) -> Reranker | None:
        if config is not None and config.model == STUDY_MODEL:
            return StaticBlend(config, encode=own, weight=args.blend, depth=args.depth, spacing=args.spacing)
        return real(config)

    with mock.patch("obsmem.retrieval.make_reranker", study_reranker):
        run = evaluate_questions(settings, modes=(*MODES, "hybrid+rerank"), question_set=args.set)
    blend = {"weight": args.blend, "depth": args.depth, "spacing": args.spacing}
    return {"model": args.model, "set": args.set, "blend": blend, "hits": hits(run.results)}


def hits(results: Sequence[Any]) -> dict[str, Any]:
    """hit@k per mode, overall and per group (split and kind), with each mode's search p50."""
    summary: dict[str, Any] = {}
    for result in results:
        groups = {"all": result.metrics, **result.by_category}
        summary[result.mode] = {
            "p50_ms": round(statistics.median(result.latencies_ms), 1),
            **{
                group: [round(metrics[f"hit@{k}"], 3) for k in CUTS]
                for group, metrics in sorted(groups.items())
                if "hit@1" in metrics
            },
        }
    return summary


def run(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    chosen = question_set(args.set)
    texts = [row["content"] for row in chosen.observations()]
    queries = [row["question"] for row in chosen.questions()]
    report: dict[str, Any] = {"model": args.model, "set": args.set}
    if args.model == "bundled":
        embedding = EmbeddingSettings()
    else:
        tokenizer, table, own, size_mb = CANDIDATES[args.model]()
        build_directory(tokenizer, table, directory)
        embedding = EmbeddingSettings(model=str(directory), encoder="torch-fp32")
        report["package_mb"] = size_mb
        report["dimensions"] = int(np.asarray(table).shape[1])
        report["agreement_with_package"] = agreement(embedding, own, texts)
    report["speed_one_thread"] = speed(embedding, texts, queries)
    if not args.speed_only:
        settings = load_settings(semantic={"embedding": embedding.model_dump()})
        report["hits"] = hits(evaluate_questions(settings, modes=MODES, question_set=args.set).results)
    return report


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", choices=MODELS, default="wordllama")
    parser.add_argument("--set", default="coding", help="a shipped question set (default: coding)")
    parser.add_argument("--speed-only", action="store_true", help="measure speed and agreement only")
    parser.add_argument("--blend", type=float, help="blend the model's cosine into bundled hybrid at this weight")
    parser.add_argument("--depth", type=int, default=10, help="fused candidates the blend reorders (default 10)")
    parser.add_argument("--spacing", type=float, default=0.2, help="prior per fused position (default 0.2)")
    args = parser.parse_args(argv)
    if args.blend is not None:
        if args.model == "bundled":
            parser.error("--blend takes a static model's cosine: name one with --model")
        print(json.dumps(blended(args), indent=1))
        return
    with tempfile.TemporaryDirectory(prefix="static-model-") as directory:
        print(json.dumps(run(args, Path(directory)), indent=1))


if __name__ == "__main__":
    main()
