"""What common words at half weight (``[semantic.fusion] common_word_share``) cost a search.

    python benchmarks/common_words.py [--shared-data ../shared/data] [--rounds 5] [--max-postings N]

Indexes the first LoCoMo development conversation as ``obsmem eval locomo`` does (way a: each turn an
observation, default ``[semantic]`` settings, the bundled model) and asks its questions. Almost every one
names a speaker, a word most of the conversation's keyword documents hold, so almost every one is
embedded twice. Prints JSON with medians (p50) in milliseconds, each pair measured in the same process in
alternating rounds so both sides see the same machine:

- ``embedding``: one question embedded alone (``embed_query``) against the question and the question
  without its common words in one call (``embed_queries``, what the search makes);
- ``finding_common_words``: the read of term counts that finds them (``without_common_words``), with the
  counts cached as a running service has them after the first search of a word, and the share of
  questions that have any;
- ``search_excluding_embedding``: ``Obsmem.search`` in hybrid mode with the query embeddings made ahead,
  with the setting at 0 (off) and at its default, and their ratio;
- ``stretch_count_p50_ms``: what a count that stopped at its bound adds on SQLite, the count of the newest
  chunks it was counted in (``VectorSet.live_within``), in sets of 100,000 and 1,000,000 chunks.

With ``--max-postings`` below the conversation's counts (``[semantic.bm25] max_postings``; 50 puts every
speaker's name past it), the counts stop at the bound and are scaled as in a large project.

BLAS and torch run on one thread (the service does the same for a query).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from semantic_corpus import DEFAULT_SHARED  # noqa: E402
from semantic_query import embed_ahead, served_from, unserved  # noqa: E402

from obsmem import Obsmem  # noqa: E402
from obsmem.eval.datasets.locomo import load_locomo  # noqa: E402
from obsmem.eval.ingest import index_project, load_locomo_conversation  # noqa: E402
from obsmem.indexer.vectors import VectorSet  # noqa: E402
from obsmem.settings import load_settings  # noqa: E402


def milliseconds(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 3)


def timed(call: Any, *args: Any) -> float:
    started = time.perf_counter()
    call(*args)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shared-data", type=Path, default=DEFAULT_SHARED)
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds over every question")
    parser.add_argument("--max-postings", type=int, default=None, help="[semantic.bm25] max_postings")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    conversation = load_locomo(args.shared_data / "locomo" / "locomo-dev5.json")[0]
    questions = list(dict.fromkeys(question.text for question in conversation.questions))
    with tempfile.TemporaryDirectory(prefix="obsmem-common-words-") as directory:
        semantic: dict[str, Any] = {"index": {"background": False}}
        if args.max_postings is not None:
            semantic["bm25"] = {"max_postings": args.max_postings}
        settings = load_settings(data_dir=Path(directory), semantic=semantic)
        with Obsmem(settings, background_indexing=False) as service:
            project, _ = load_locomo_conversation(service, conversation, "a")
            index_project(service, project)
            figures = measure(service, project, questions, args.rounds)
            figures["max_postings"] = settings.semantic.bm25.max_postings
            figures["stretch_count_p50_ms"] = {f"{size:,}": stretch_count(size) for size in (100_000, 1_000_000)}
            print(json.dumps(figures, indent=2))


def stretch_count(size: int, repeats: int = 50) -> float:
    """Median time of counting the newest stretch of a set of ``size`` chunks (a tenth of it)."""
    vectors = VectorSet(1, ef_search=10, capacity=size)
    vectors.add(
        list(range(1, size + 1)), np.zeros((size, 1), dtype=np.float32), ["2024-01-01 00:00:00"] * size, ["s"] * size
    )
    return milliseconds([timed(vectors.live_within, size - size // 10) for _ in range(repeats)])


def measure(service: Obsmem, project: str, questions: list[str], rounds: int) -> dict[str, Any]:
    index = service.indexer.project(project)
    searcher = service.hybrid
    assert searcher is not None
    embedder = index.embedder
    reduced = {question: searcher.without_common_words(index, question) for question in questions}
    cut = [question for question in questions if reduced[question] is not None]
    one, two, finding, off, on = [], [], [], [], []
    embedded, _, _ = embed_ahead(service, project, questions)
    fusion = searcher.settings.fusion
    default_share = fusion.common_word_share
    sides = [(0.0, off), (default_share, on)]
    missed: list[list[str]] = []
    for round_number in range(rounds):
        for question in cut:
            one.append(timed(embedder.embed_query, question))
            two.append(timed(embedder.embed_queries, [question, reduced[question]]))
        for question in questions:
            finding.append(timed(searcher.without_common_words, index, question))
        with served_from(embedder, embedded) as missed_now:
            for question in questions:  # both settings per question, the first one swapped every round
                for share, samples in sides if round_number % 2 == 0 else sides[::-1]:
                    fusion.common_word_share = share
                    samples.append(timed(service.search, project, question))
        missed += missed_now
    fusion.common_word_share = default_share
    return {
        "benchmark": "common_words",
        "questions": len(questions),
        "questions_with_common_words": len(cut),
        "chunks": index.vectors().live,  # type: ignore[union-attr]
        "rounds": rounds,
        "embedding": {
            "question_alone_p50_ms": milliseconds(one),
            "question_and_without_common_words_p50_ms": milliseconds(two),
            "ratio": round(statistics.median(two) / statistics.median(one), 2),
        },
        "finding_common_words_p50_ms": milliseconds(finding),
        "search_excluding_embedding": {
            "off_p50_ms": milliseconds(off),
            "default_p50_ms": milliseconds(on),
            "ratio": round(statistics.median(on) / statistics.median(off), 2),
            "timed_searches_that_embedded": unserved(missed, questions),
        },
    }


if __name__ == "__main__":
    main()
