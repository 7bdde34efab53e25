"""What one core can do for a query embedding: the bundled model's matrix products timed alone.

    python benchmarks/encoder_bound.py [--tokens 12] [--repeats 7]

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
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402

HIDDEN, FEED_FORWARD, LAYERS = 384, 1536, 6
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=12, help="a question's length in tokens (LoCoMo p50: 12)")
    parser.add_argument("--repeats", type=int, default=7)
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
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
