"""Can the bundled embedding model rerank the fused candidates, by late interaction, with no other weights?

A study tool, not part of the product. No cross-encoder ships with its weights on the package index
(docs/eval.md, "A better local model"), so a reranker here must come from the model obsmem already has.
all-MiniLM-L6-v2 embeds a text as the mean of its token vectors; late interaction keeps the token vectors
and scores a (question, memory) pair by MaxSim: for each question token the best cosine with any token of
the memory, averaged over the question's tokens ([CLS] and [SEP] left out). A question word with a close
counterpart anywhere in the memory counts in full, where the mean vector dilutes it.

The score reranks the first ``--depth`` fused candidates: ``weight`` times the MaxSim's z-score among them,
minus ``spacing`` per fused position (the fused order as a prior: with weight 0 nothing moves, with a large
weight MaxSim alone orders them). The rest keep their fused order below. It runs through the product's own
eval harness as a configured reranker (the harness's ``hybrid+rerank`` mode), so the hybrid and reranked
columns come from one index in one run::

    python eval/research/late_interaction.py --set coding-calibration --weight 0.5
    python eval/research/late_interaction.py --locomo locomo-dev5.json --weight 0.5

It prints, as JSON, each mode's hit@1/5/10 per split and kind (LoCoMo: recall@k overall, way a) and p50
latency. The figures and why it was not adopted are in docs/eval.md ("Late interaction with the bundled
model").
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any
from unittest import mock

import numpy as np

from obsmem.eval.results import ModeResult
from obsmem.eval.runner import evaluate_locomo, evaluate_questions
from obsmem.indexer.embed_local import bundled_model_path
from obsmem.retrieval import rerank
from obsmem.retrieval.rerank import Reranker
from obsmem.settings import RerankerSettings, load_settings

STUDY_MODEL = "late-interaction"  # the [semantic.reranker] model name this script answers for
MODES = ("vector", "hybrid", "hybrid+rerank")
CUTS = (1, 5, 10)


class LateInteraction(Reranker):
    """MaxSim of the bundled model's token vectors, blended with the fused order, for the first ``depth``."""

    def __init__(self, settings: RerankerSettings, *, weight: float, depth: int, spacing: float) -> None:
        super().__init__(settings)
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(str(bundled_model_path()), device="cpu", local_files_only=True)
        self.weight, self.depth, self.spacing = weight, depth, spacing

    def _tokens(self, texts: Sequence[str]) -> list[np.ndarray]:
        encoded = self.model.encode(list(texts), output_value="token_embeddings", batch_size=32)
        vectors = []
        for tokens in encoded:
            inner = tokens.numpy()[1:-1]  # without [CLS] and [SEP]
            vectors.append(inner / np.linalg.norm(inner, axis=1, keepdims=True))
        return vectors

    def score_batches(self, query: str, batches: list[list[str]]) -> list[list[float]]:
        """The blend over the fused order as a whole (the batches are its consecutive slices), cut back into
        the batches' shapes."""
        documents = [document for batch in batches for document in batch]
        scores = [-1000.0 - position for position in range(len(documents))]  # below the head, in fused order
        head = min(self.depth, len(documents))
        if head:
            question = self._tokens([query])[0]
            tokens = self._tokens(documents[:head])
            maxsim = np.array([float((question @ document.T).max(axis=1).mean()) for document in tokens])
            z = (maxsim - maxsim.mean()) / (maxsim.std() + 1e-9)
            for position in range(head):
                scores[position] = self.weight * float(z[position]) - self.spacing * position
        shaped, start = [], 0
        for batch in batches:
            shaped.append(scores[start : start + len(batch)])
            start += len(batch)
        return shaped


def question_summary(results: Sequence[ModeResult]) -> dict[str, Any]:
    """hit@k per mode, split and kind (positives with one target; the split's overall row is ``all``)."""
    sums: dict[tuple[str, str, str], list[dict[str, float]]] = defaultdict(list)
    for result in results:
        for row in result.per_question:
            metrics = row["metrics"]
            if "hit@1" not in metrics:
                continue
            splits = [g for g in row["groups"] if g in ("calibration", "held_out")]
            kinds = [g for g in row["groups"] if g not in ("calibration", "held_out")]
            for split in splits:
                for kind in ["all", *kinds]:
                    sums[(result.mode, split, kind)].append(metrics)
    summary: dict[str, Any] = defaultdict(lambda: defaultdict(dict))
    for (mode, split, kind), rows in sorted(sums.items()):
        summary[mode][split][kind] = {
            "n": len(rows),
            **{f"hit@{k}": round(statistics.fmean(r[f"hit@{k}"] for r in rows), 3) for k in CUTS},
        }
    return summary


def run(args: argparse.Namespace) -> dict[str, Any]:
    settings = load_settings(semantic={"reranker": {"provider": "local", "model": STUDY_MODEL}})
    real = rerank.make_reranker

    def study_reranker(config: RerankerSettings | None) -> Reranker | None:
        if config is not None and config.model == STUDY_MODEL:
            return LateInteraction(config, weight=args.weight, depth=args.depth, spacing=args.spacing)
        return real(config)

    with mock.patch("obsmem.retrieval.make_reranker", study_reranker):
        if args.locomo:
            eval_run = evaluate_locomo(settings, args.locomo, modes=MODES, ways=("a",))
        else:
            eval_run = evaluate_questions(settings, modes=MODES, question_set=args.set)
    report: dict[str, Any] = {"weight": args.weight, "depth": args.depth, "spacing": args.spacing}
    report["p50_ms"] = {r.mode: round(statistics.median(r.latencies_ms), 1) for r in eval_run.results}
    if args.locomo:
        report["recall"] = {
            r.mode: {k: round(v, 3) for k, v in r.metrics.items() if k.startswith("recall@")} for r in eval_run.results
        }
    else:
        report["set"] = args.set
        report["hits"] = question_summary(eval_run.results)
    return report


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--set", default="coding-calibration", help="a shipped question set")
    parser.add_argument("--locomo", help="a LoCoMo file instead of a question set (way a)")
    parser.add_argument("--weight", type=float, default=0.5, help="MaxSim z-score weight (default 0.5)")
    parser.add_argument("--depth", type=int, default=10, help="fused candidates reranked (default 10)")
    parser.add_argument("--spacing", type=float, default=0.2, help="prior per fused position (default 0.2)")
    print(json.dumps(run(parser.parse_args(argv)), indent=1))


if __name__ == "__main__":
    main()
