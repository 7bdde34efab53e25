"""The indexing thread's own work (everything but the model), per chunk, with the model's vectors precomputed.

    python benchmarks/indexing_cpu.py [--shared-data DIR] [--turns 0] [--top 12]

A backfill runs the model beside the indexing thread (commits, keyword documents and their neighbours'
rewrites, graph growth) on the same cores, so every CPU second that thread spends is taken from the
model. Here the LoCoMo dev turns are embedded first (``onnx-int8``, outside the measurement), then
``Obsmem.index`` runs with an embedder that returns those vectors, under cProfile timed by the thread's
own CPU clock (so waiting for a core, which depends on the machine's load, is not counted). Prints JSON:
the thread's CPU seconds and per chunk, the statements it executed (``execute`` calls; ``executemany``
counted once), and the functions with the most CPU of their own.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from encoder import locomo  # noqa: E402
from semantic_corpus import DEFAULT_SHARED, ingest  # noqa: E402

from obsmem import Obsmem  # noqa: E402
from obsmem.indexer.embed_onnx import OnnxEmbedder  # noqa: E402
from obsmem.indexer.embedders import Embedder  # noqa: E402
from obsmem.settings import EmbeddingSettings, load_settings  # noqa: E402


class Precomputed(Embedder):
    """The vectors of a real model, looked up by text: the model's cost is left out, its vectors are not."""

    request_size = 1024

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        super().__init__(sentences="whole")  # the table holds whole texts' vectors
        self.table = table

    @property
    def identity(self) -> str:
        return "precomputed"

    def embed_batch(self, texts: list[str], *, purpose: str) -> Any:
        return np.stack([self.table[text] for text in texts])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shared-data", type=Path, default=DEFAULT_SHARED)
    parser.add_argument("--turns", type=int, default=0, help="only the first N turns (0: all 2,760)")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    _, turns = locomo(args.shared_data)
    turns = turns[: args.turns] if args.turns else turns
    model = OnnxEmbedder(EmbeddingSettings(encoder="onnx-int8"))
    table = dict(zip(turns, model.embed_documents(turns), strict=True))
    model.close()
    work = Path(tempfile.mkdtemp(prefix="obsmem-indexing-cpu-"))
    with Obsmem(load_settings(data_dir=work, semantic={"index": {"background": False}})) as service:
        ingest(service, "bench", turns)
        assert service.indexer is not None
        service.indexer.embedder = Precomputed(table)
        profile = cProfile.Profile(time.thread_time)
        load = os.getloadavg()[0]
        started = time.perf_counter()
        profile.enable()
        report = service.index("bench", every_core=True)
        profile.disable()
        wall = time.perf_counter() - started
    stats = pstats.Stats(profile)
    cpu = sum(row[2] for row in stats.stats.values())  # type: ignore[attr-defined]
    executes = sum(
        row[1] for key, row in stats.stats.items() if key[2] == "<method 'execute' of 'apsw.Connection' objects>"
    )  # type: ignore[attr-defined]
    chunks = report.totals.chunks_embedded
    own = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)[: args.top]  # type: ignore[attr-defined]
    print(
        json.dumps(
            {
                "benchmark": "indexing_cpu",
                "chunks": chunks,
                "load_average_1min": round(load, 2),
                "thread_cpu_s": round(cpu, 3),
                "thread_cpu_ms_per_chunk": round(cpu / chunks * 1000, 3),
                "wall_s": round(wall, 2),
                "statements": executes,
                "statements_per_chunk": round(executes / chunks, 2),
                "top_own_cpu_s": {f"{Path(key[0]).name}:{key[2]}": round(row[2], 3) for key, row in own},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
