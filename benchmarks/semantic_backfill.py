"""Backfill cost of semantic indexing against the model's encode() alone, in the same run.

    python benchmarks/semantic_backfill.py --memories 10000 [--data-dir DIR] [--add 100]

Ingests N one-line memories from real text, then times ``Obsmem.index`` (chunk, embed, write the
stores, build and publish the graph) and the configured encoder's own encode (``embed_documents``, as the
indexer calls it, sentence vectors included) on the very same chunk texts
with the same loaded model, batch size and threads. Then adds ``--add`` memories to the finished index and times one
incremental pass against encoding those texts alone. Prints JSON. ``--data-dir`` keeps the database for
the query benchmark (semantic_query.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from semantic_corpus import DEFAULT_SHARED, ingest, memories, sentence_pool  # noqa: E402

from obsmem import Obsmem  # noqa: E402
from obsmem.settings import load_settings  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--add", type=int, default=100)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--shared-data", type=Path, default=DEFAULT_SHARED)
    parser.add_argument("--project", default="bench")
    args = parser.parse_args()
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="obsmem-bench-"))
    pool = sentence_pool(args.shared_data)
    texts = memories(args.memories + args.add, pool)
    settings = load_settings(data_dir=data_dir, semantic={"index": {"background": False}})
    with Obsmem(settings) as service:
        ingest_seconds = ingest(service, args.project, texts[: args.memories], total=len(texts))
        index = service.indexer.project(args.project)
        embedder = index.embedder
        embedder.embed_documents(["warm up the model"])  # load the model outside both timings

        started = time.perf_counter()
        summary = service.index(args.project)
        backfill_seconds = time.perf_counter() - started

        chunk_texts = [
            row[0] for row in service.database(args.project).query("SELECT text FROM semantic_chunks ORDER BY id")
        ]
        started = time.perf_counter()
        embedder.embed_documents(chunk_texts)  # the configured encoder's own encode, as the indexer calls it
        encode_seconds = time.perf_counter() - started

        extra = texts[args.memories :]
        ingest(service, args.project, extra, offset=args.memories, total=len(texts))
        started = time.perf_counter()
        while service.indexer.run_batch(args.project).remaining:
            pass
        add_seconds = time.perf_counter() - started
        started = time.perf_counter()
        embedder.embed_documents(extra)
        add_encode_seconds = time.perf_counter() - started
        status = service.status(args.project)
    print(
        json.dumps(
            {
                "benchmark": "semantic_backfill",
                "memories": args.memories,
                "chunks": len(chunk_texts),
                "ingest_seconds": round(ingest_seconds, 2),
                "backfill_seconds": round(backfill_seconds, 2),
                "encode_only_seconds": round(encode_seconds, 2),
                "backfill_over_encode": round(backfill_seconds / encode_seconds, 3),
                "chunks_per_second": round(len(chunk_texts) / backfill_seconds, 1),
                "added": len(extra),
                "add_seconds": round(add_seconds, 3),
                "add_encode_only_seconds": round(add_encode_seconds, 3),
                "add_over_encode": round(add_seconds / add_encode_seconds, 3),
                "indexed_count": status.indexed_count,
                "source_count": status.source_count,
                "graph_file": summary.status.graph_file,
                "cpu_count": os.cpu_count(),
                "data_dir": str(data_dir) if args.data_dir else None,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
