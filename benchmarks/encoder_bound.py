"""What this CPU can do for the bundled model in fp32: its matrix products timed alone, for a query and a backfill.

    python benchmarks/encoder_bound.py [--tokens 12] [--repeats 7] [--shared-data DIR --turns 800]

all-MiniLM-L6-v2 has 6 layers of hidden size 384 and feed-forward size 1536. For a question of ``T``
tokens each layer multiplies a ``T x 384`` activation by four ``384 x 384`` matrices (query, key, value,
output) and by ``384 x 1536`` and ``1536 x 384`` (the feed-forward pair): about 2 x 10.6M x T floating-point
operations in all, before attention itself, layer norms, GELU, pooling and tokenising. This script times
exactly those products in float32 with numpy's BLAS on one thread (as a query runs), at ``--tokens`` rows
and, for the core's best rate, at 512 rows, and prints one JSON document:

- ``per_shape`` — microseconds and GFLOP/s for each product at the question's size;
- ``products_per_query_ms`` — the six layers' products at the question's size, at the rate numpy's BLAS
  reaches on such small matrices;
- ``best_rate_gflops`` and ``at_best_rate_ms`` — the same work at the rate the core reaches on large
  products: what a perfect kernel could approach, and so a floor under an fp32 query embedding on this
  core whatever runtime runs it (attention, layer norms, GELU, pooling and tokenising come on top).

Compare ``products_per_query_ms`` with the encoders' query p50 from ``benchmarks/encoder.py`` in the same
sitting: if the floor is near or above a target, only fewer operations (int8) or more cores can meet it.

With ``--shared-data`` it also bounds a backfill: the LoCoMo turns ``benchmarks/encoder.py`` backfills
(``"<speaker>: <text>"``), each tokenised by the model's own tokenizer (special tokens included, cut at the
model's 256 tokens, no padding), cost their layers' products plus attention's two products per layer.
That work at the best rate of every core at once (one core's best rate times the cores: perfect scaling,
so a ceiling) is the most chunks per second any fp32 encoder could reach here, ``ceiling_chunks_per_s``.
A plain fp32 ``SentenceTransformer.encode`` of the same turns with torch's default threads is timed in the
same run, and ``ceiling_over_plain`` says how many times faster than it an fp32 backfill could possibly be.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402

HIDDEN, FEED_FORWARD, LAYERS = 384, 1536, 6
MAX_TOKENS = 256  # the model's max_seq_length: longer texts are cut
# (rows of the weight, columns, how many of that product one layer makes)
SHAPES = ((HIDDEN, HIDDEN, 4), (HIDDEN, FEED_FORWARD, 1), (FEED_FORWARD, HIDDEN, 1))


def timed(rows: int, inner: int, outer: int, repeats: int) -> float:
    """Median seconds of one ``rows x inner`` by ``inner x outer`` float32 product."""
    generator = np.random.default_rng(0)
    left = generator.standard_normal((rows, inner), dtype=np.float32)
    right = generator.standard_normal((inner, outer), dtype=np.float32)
    calls = max(20, 200_000 // rows)
    for _ in range(calls // 10):
        left @ right
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(calls):
            left @ right
        samples.append((time.perf_counter() - started) / calls)
    return statistics.median(samples)


def text_flops(tokens: int, flops_per_token: int) -> int:
    """One text's products: the layers' weights for each token, and attention's scores and mix (T x T x H each)."""
    return tokens * flops_per_token + LAYERS * 2 * 2 * tokens * tokens * HIDDEN


def backfill_bound(shared: Path, turns_wanted: int, best_rate: float, flops_per_token: int) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).parent))
    from encoder import locomo
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

    from obsmem.indexer.embed_local import bundled_model_path

    _, turns = locomo(shared)
    turns = turns[:turns_wanted] if turns_wanted else turns
    path = bundled_model_path()
    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    lengths = [min(len(encoding.ids), MAX_TOKENS) for encoding in tokenizer.encode_batch(turns)]
    work = sum(text_flops(length, flops_per_token) for length in lengths)
    cores = os.cpu_count() or 1
    ceiling = len(turns) / (work / (best_rate * 1e9 * cores))

    import torch

    torch.set_num_threads(cores)  # torch's default: one thread per core
    model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
    model.encode(turns[:64], batch_size=32, show_progress_bar=False)
    seconds = []
    for _ in range(3):
        started = time.perf_counter()
        model.encode(turns, batch_size=32, show_progress_bar=False)
        seconds.append(time.perf_counter() - started)
    plain = len(turns) / statistics.median(seconds)
    return {
        "turns": len(turns),
        "tokens_p50": statistics.median(lengths),
        "tokens_mean": round(statistics.fmean(lengths), 1),
        "gflop_total": round(work / 1e9, 1),
        "cores": cores,
        "ceiling_chunks_per_s": round(ceiling, 1),
        "fp32_plain_encode_chunks_per_s": round(plain, 1),
        "plain_share_of_ceiling": round(plain / ceiling, 3),
        "ceiling_over_plain": round(ceiling / plain, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=12, help="a question's length in tokens (LoCoMo p50: 12)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--shared-data", type=Path, help="also bound a backfill of LoCoMo's turns (locomo/ under it)")
    parser.add_argument("--turns", type=int, default=800, help="the first N turns, as encoder.py --turns (0: all)")
    args = parser.parse_args()
    per_shape = []
    per_layer = 0.0
    flops_per_layer = 0
    best_rate = 0.0
    for inner, outer, count in SHAPES:
        seconds = timed(args.tokens, inner, outer, args.repeats)
        flops = 2 * args.tokens * inner * outer
        large = timed(512, inner, outer, args.repeats)
        best_rate = max(best_rate, 2 * 512 * inner * outer / large / 1e9)
        per_shape.append(
            {
                "shape": f"{args.tokens}x{inner} @ {inner}x{outer}",
                "per_layer": count,
                "microseconds": round(seconds * 1e6, 1),
                "gflops": round(flops / seconds / 1e9, 1),
            }
        )
        per_layer += count * seconds
        flops_per_layer += count * flops
    report = {
        "benchmark": "encoder_bound",
        "tokens": args.tokens,
        "load_average_1min": os.getloadavg()[0],
        "per_shape": per_shape,
        "products_per_query_ms": round(LAYERS * per_layer * 1e3, 2),
        "flops_per_query_millions": round(LAYERS * flops_per_layer / 1e6, 1),
        "best_rate_gflops": round(best_rate, 1),
        "at_best_rate_ms": round(LAYERS * flops_per_layer / best_rate / 1e6, 2),
    }
    if args.shared_data:
        per_token = LAYERS * flops_per_layer // args.tokens
        report["backfill"] = backfill_bound(args.shared_data, args.turns, best_rate, per_token)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
