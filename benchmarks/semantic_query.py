"""Hybrid query latency, date-filtered search against a brute-force reference, and HNSW recall@100.

    python benchmarks/semantic_query.py --data-dir DIR [--project bench] [--queries 200]

Runs on a database indexed by semantic_backfill.py (or semantic_million.py). Queries are LoCoMo
questions (real natural language). Reports, as medians (p50) and p95 in milliseconds:

- ``hybrid_excluding_embedding`` — ``Obsmem.search`` with the query vectors already computed;
- ``hybrid_including_embedding`` — ``Obsmem.search`` end to end, the local query embedding included, on
  another set of questions (of the same size);
- ``embedding_only`` — the query embedding alone, with the read of its words' counts that decides whether
  the question is also embedded without its common words (``common_word_share``), and that second
  embedding in the same batch when it is;
- ``date_filtered`` — windows of 1, 7, 30 and 180 days (excluding embedding), each result compared with
  a brute-force reference (exact vector scan of the window, BM25 over the window, the same fusion):
  ``omissions`` counts reference hits missing from the real result;
- ``recall_at_100`` — the HNSW top-100 against the exact top-100 over all vectors.
- ``timed_searches_that_embedded`` — how many searches of the first set (open or windowed) embedded
  their question anyway, so their figures would include it: 0 when every one was served.

Every timed search runs a question for the first time: the warm-up (model, caches, the process's first
page faults) uses 40 other questions, and the two hybrid figures use disjoint sets, so no figure profits
from pages a repeat of the same question would find already read. The two sets' searches alternate in
blocks of 10, so both figures see the same state of the page cache. Words shared with earlier questions
do find their keyword counts cached (for 5 minutes), as they would in a running service.

BLAS is pinned to one thread (the service does the same) and query embeddings run on one torch thread.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from semantic_corpus import DEFAULT_SHARED  # noqa: E402

from obsmem import Obsmem  # noqa: E402
from obsmem.dates import parse_window  # noqa: E402
from obsmem.indexer.vectors import Filter  # noqa: E402
from obsmem.retrieval.common_words import half_weighted  # noqa: E402
from obsmem.retrieval.ranked import RankedList  # noqa: E402
from obsmem.settings import load_settings  # noqa: E402


def date_filtered_report(
    filtered: dict[str, list[float]], sizes: dict[str, list[int]], omissions: int, compared: int
) -> dict[str, Any]:
    """The date-filtered figures: p50/p95 overall and per window (seconds per search, with the median
    number of chunks in the window), and the reference hits the real results omitted."""
    every = [t for samples in filtered.values() for t in samples]
    return {
        "overall": percentiles(every),
        "by_window": {
            name: percentiles(samples) | {"median_window_chunks": int(statistics.median(sizes[name]))}
            for name, samples in filtered.items()
        },
        "omissions_vs_brute_force": omissions,
        "searches_compared": compared,
    }


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p95_ms": round(ordered[int(len(ordered) * 0.95) - 1] * 1000, 2),
        "n": len(ordered),
    }


WARM_UP_QUESTIONS = 40
# Searches per block when the two hybrid loops alternate. Blocks rather than single searches: a search
# right after an embedding starts with the CPU caches full of model weights, which is part of the
# including-embedding figure but not of the search's own cost.
BLOCK = 10


def questions(shared: Path, count: int) -> list[str]:
    """``count`` distinct LoCoMo questions in a fixed random order."""
    found = []
    for sample in json.loads((shared / "locomo" / "locomo-dev5.json").read_text()):
        found.extend(qa["question"] for qa in sample["qa"])
    found = list(dict.fromkeys(found))
    random.Random(1).shuffle(found)
    if len(found) < count:
        raise SystemExit(f"only {len(found)} distinct questions; ask for fewer")
    return found[:count]


def embed_ahead(service: Any, project: str, texts: list[str]) -> tuple[dict[str, Any], dict[str, Any], list[float]]:
    """Each text's query embeddings made now, as hybrid search makes them: the question, and the question
    without the index's common words when it has any (``common_word_share``), in one model call. Returns
    the embedding of every text embedded (for :func:`served_from`), each question's query vector as the
    search uses it (for a reference ranking) and the seconds each question's embeddings took."""
    index = service.indexer.project(project)
    embedder = index.embedder
    embedded: dict[str, Any] = {}
    query_vectors: dict[str, Any] = {}
    seconds = []
    for text in texts:
        started = time.perf_counter()
        without = service.hybrid.without_common_words(index, text)
        asked = [text] if without is None else [text, without]
        vectors = embedder.embed_queries(asked)
        seconds.append(time.perf_counter() - started)
        embedded.update(zip(asked, vectors, strict=True))
        query_vectors[text] = vectors[0] if without is None else half_weighted(vectors[0], vectors[1])
    return embedded, query_vectors, seconds


@contextmanager
def served_from(embedder: Any, embedded: dict[str, Any]) -> Iterator[list[list[str]]]:
    """While the block runs, the query embeddings of texts in ``embedded`` come from it (no model call);
    any other text is embedded by the model as usual. Yields the batches the model embedded, so a figure
    meant to exclude the embedding can show that none of its searches made one (:func:`unserved`)."""
    one, many = embedder.embed_query, embedder.embed_queries
    missed: list[list[str]] = []

    def embed_queries(queries: list[str]) -> Any:
        if all(query in embedded for query in queries):
            return np.stack([embedded[query] for query in queries])
        missed.append(list(queries))
        return many(queries)

    embedder.embed_query = lambda query: embed_queries([query])[0]
    embedder.embed_queries = embed_queries
    try:
        yield missed
    finally:
        embedder.embed_query, embedder.embed_queries = one, many


def unserved(missed: list[list[str]], texts: list[str]) -> int:
    """How many of ``texts``' searches embedded their question with the model inside :func:`served_from`
    (0 when every figure said to exclude the embedding does)."""
    wanted = set(texts)
    return sum(1 for batch in missed if batch and batch[0] in wanted)


def reference(service, project: str, query: str, vector, where: Filter, limit: int) -> list[str]:
    """Brute force: exact scan of every vector in the window, BM25 over the window, the same fusion and
    neighbour smoothing as the product (``HybridSearcher.rank``)."""
    searcher = service.hybrid
    index = service.indexer.project(project)
    vectors = index.vectors()
    k = searcher.settings.fusion.candidates_per_list
    slots = None if where.is_open else vectors.selection(where)
    with index.reader() as store:
        lists = [
            searcher.bm25.search(store, query, k, where, chunks=vectors.live),
            RankedList("vector", vectors.exact(vector, slots, k)),
        ]
        valid = store.validate({label for ranked in lists for label in ranked.labels}, where)
        for ranked in lists:
            ranked.items = [item for item in ranked.items if item[0] in valid][:k]
        fused, _ = searcher.rank(store, lists, valid, vectors, vector, where, by_session=not searcher.supersedes(query))
    hits: list[str] = []
    for label, _ in fused[: searcher.settings.fusion.fused_candidates]:
        memory_id = valid[label].memory_id
        if memory_id not in hits:
            hits.append(memory_id)
    return hits[:limit]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--project", default="bench")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--shared-data", type=Path, default=DEFAULT_SHARED)
    args = parser.parse_args()
    settings = load_settings(data_dir=args.data_dir, semantic={"index": {"background": False}})
    report: dict[str, object] = {"benchmark": "semantic_query", "project": args.project}
    with Obsmem(settings) as service:
        index = service.indexer.project(args.project)
        started = time.perf_counter()
        vectors = index.vectors()
        report["load_seconds"] = round(time.perf_counter() - started, 2)
        index.maintain()  # a graph for every vector before timing
        report["chunks"] = vectors.live
        report["graph"] = vectors.graph is not None
        report["memories"] = service.status(args.project).source_count
        embedder = index.embedder
        pool = questions(args.shared_data, WARM_UP_QUESTIONS + 2 * args.queries)
        warm_up, texts, others = (
            pool[:WARM_UP_QUESTIONS],
            pool[WARM_UP_QUESTIONS : WARM_UP_QUESTIONS + args.queries],
            pool[WARM_UP_QUESTIONS + args.queries :],
        )
        for text in warm_up:
            service.search(args.project, text)

        full_times = []
        embedded, query_vectors, embed_times = embed_ahead(service, args.project, texts)
        # A question of ``texts`` finds its vectors already computed; one of ``others`` is embedded.
        with served_from(embedder, embedded) as missed:
            bare_times = []
            for start in range(0, len(texts), BLOCK):  # alternate blocks: both see the same page cache over time
                for text in others[start : start + BLOCK]:
                    started = time.perf_counter()
                    service.search(args.project, text)
                    full_times.append(time.perf_counter() - started)
                for text in texts[start : start + BLOCK]:
                    started = time.perf_counter()
                    service.search(args.project, text)
                    bare_times.append(time.perf_counter() - started)
            report["embedding_only"] = percentiles(embed_times)
            report["hybrid_including_embedding"] = percentiles(full_times)
            report["hybrid_excluding_embedding"] = percentiles(bare_times)

            dates = index.db.query("SELECT min(date), max(date) FROM memories")[0]
            first = datetime.strptime(dates[0][:10], "%Y-%m-%d")
            span_days = max(1, (datetime.strptime(dates[1][:10], "%Y-%m-%d") - first).days)
            rng = random.Random(7)
            filtered: dict[str, list[float]] = {}
            omissions = compared = 0
            window_sizes: dict[str, list[int]] = {}
            for text in texts:
                for days in (1, 7, 30, 180):
                    start = first + timedelta(days=rng.randrange(max(1, span_days - days)))
                    after, before = (
                        start.strftime("%Y-%m-%d"),
                        (start + timedelta(days=days - 1)).strftime("%Y-%m-%d"),
                    )
                    started = time.perf_counter()
                    result = service.search(args.project, text, after=after, before=before, limit=20)
                    filtered.setdefault(f"{days}d", []).append(time.perf_counter() - started)
                    window = parse_window(after, before)
                    where = Filter(window.lower, window.upper)
                    window_sizes.setdefault(f"{days}d", []).append(len(vectors.selection(where)))
                    expected = reference(service, args.project, text, query_vectors[text], where, 20)
                    got = [hit.memory_id for hit in result.hits]
                    omissions += len(set(expected) - set(got))
                    compared += 1
            all_filtered = [t for samples in filtered.values() for t in samples]
            report["date_filtered"] = date_filtered_report(filtered, window_sizes, omissions, compared) | {
                "p50_ratio_to_unfiltered": round(statistics.median(all_filtered) / statistics.median(bare_times), 2),
            }
        # The searches of ``texts`` (open and filtered) that embedded anyway: their figures would include it.
        report["timed_searches_that_embedded"] = unserved(missed, texts)

        hits = 0
        for text in texts:
            exact = {label for label, _ in vectors.exact(query_vectors[text], None, 100)}
            approximate = {label for label, _ in vectors.approximate(query_vectors[text], 100) or []}
            hits += len(exact & approximate)
        report["recall_at_100"] = round(hits / (100 * len(texts)), 4)
        report["hnsw"] = {
            "M": settings.semantic.index.hnsw_m,
            "ef_construction": settings.semantic.index.hnsw_ef_construction,
            "ef_search": settings.semantic.index.hnsw_ef_search,
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
