"""Exact vector scan of a date window: the numpy scan hybrid search uses against sqlite-vec's distance functions.

    python benchmarks/vector_scan.py [--rows 100000] [--windows 1000,10000,50000] [--repeats 30]

A date- or session-filtered hybrid search ranks the window's vectors by an exact scan (and a small project
is scanned whole). The product scans the in-memory float32 matrix with numpy (``VectorSet.exact``). The
alternative is to let SQLite scan the stored embeddings with sqlite-vec's ``vec_distance_cosine`` or
``vec_distance_l2`` (for unit vectors L2 orders exactly as cosine does) in one statement over the window,
with the date index choosing the rows. This script builds one table of ``--rows`` random unit vectors
(384 dimensions, all-MiniLM-L6-v2's size) dated one minute apart, and times the top-100 of windows of
each size three ways:

- ``numpy_in_memory`` — the product's path: ``matrix[first:last] @ query`` and a partial sort;
- ``sqlite_vec_cosine`` / ``sqlite_vec_l2`` — ``SELECT id FROM t WHERE date BETWEEN ? AND ? ORDER BY
  vec_distance_*(embedding, ?) LIMIT 100``;
- ``numpy_from_sqlite`` — reading the window's blobs from SQLite and scanning them with numpy (what a
  scan inside SQLite without the in-memory matrix would cost).

It checks the three return the same top 100 and prints one JSON document: p50 and p95 in milliseconds
per window size and method. BLAS is pinned to one thread, as in the service.
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

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import apsw  # noqa: E402
import numpy as np  # noqa: E402
import sqlite_vec  # noqa: E402

DIMENSIONS = 384
TOP = 100


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p95_ms": round(ordered[max(0, int(len(ordered) * 0.95) - 1)] * 1000, 3),
    }


def stamp(minute: int) -> str:
    return f"{minute:012d}"  # sortable text, like the stored dates


def build(path: Path, rows: int, seed: int) -> tuple[apsw.Connection, np.ndarray]:
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((rows, DIMENSIONS)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    conn = apsw.Connection(str(path))
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, date TEXT NOT NULL, embedding BLOB NOT NULL)")
    conn.execute("CREATE INDEX t_date ON t (date)")
    with conn:
        conn.executemany(
            "INSERT INTO t (id, date, embedding) VALUES (?, ?, ?)",
            ((i + 1, stamp(i), matrix[i].tobytes()) for i in range(rows)),
        )
    return conn, matrix


def numpy_top(matrix: np.ndarray, first: int, last: int, query: np.ndarray) -> list[int]:
    scores = matrix[first:last] @ query
    top = np.argpartition(-scores, TOP - 1)[:TOP]
    order = top[np.argsort(-scores[top], kind="stable")]
    return [int(first + i + 1) for i in order]


def sqlite_vec_top(conn: apsw.Connection, function: str, first: int, last: int, query: np.ndarray) -> list[int]:
    sql = f"SELECT id FROM t WHERE date BETWEEN ? AND ? ORDER BY {function}(embedding, ?) LIMIT {TOP}"
    return [row[0] for row in conn.execute(sql, (stamp(first), stamp(last - 1), query.tobytes()))]


def numpy_from_sqlite_top(conn: apsw.Connection, first: int, last: int, query: np.ndarray) -> list[int]:
    rows = conn.execute("SELECT id, embedding FROM t WHERE date BETWEEN ? AND ?", (stamp(first), stamp(last - 1)))
    ids, blobs = zip(*rows, strict=True)
    block = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), DIMENSIONS)
    scores = block @ query
    top = np.argpartition(-scores, TOP - 1)[:TOP]
    return [int(ids[i]) for i in top[np.argsort(-scores[top], kind="stable")]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--windows", default="1000,10000,50000")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    windows = [int(w) for w in args.windows.split(",")]
    if any(w < TOP or w > args.rows for w in windows):
        sys.exit(f"every window must hold between {TOP} and --rows rows")
    rng = np.random.default_rng(args.seed + 1)
    with tempfile.TemporaryDirectory(prefix="vector-scan-") as directory:
        started = time.perf_counter()
        conn, matrix = build(Path(directory) / "scan.db", args.rows, args.seed)
        build_s = time.perf_counter() - started
        results: dict[str, dict[str, dict[str, float]]] = {}
        agree = True
        for window in windows:
            timings: dict[str, list[float]] = {
                "numpy_in_memory": [],
                "sqlite_vec_cosine": [],
                "sqlite_vec_l2": [],
                "numpy_from_sqlite": [],
            }
            for _ in range(args.repeats):
                first = int(rng.integers(0, args.rows - window + 1))
                last = first + window
                query = rng.standard_normal(DIMENSIONS).astype(np.float32)
                query /= np.linalg.norm(query)
                runs = {
                    "numpy_in_memory": lambda: numpy_top(matrix, first, last, query),  # noqa: B023
                    "sqlite_vec_cosine": lambda: sqlite_vec_top(conn, "vec_distance_cosine", first, last, query),  # noqa: B023
                    "sqlite_vec_l2": lambda: sqlite_vec_top(conn, "vec_distance_l2", first, last, query),  # noqa: B023
                    "numpy_from_sqlite": lambda: numpy_from_sqlite_top(conn, first, last, query),  # noqa: B023
                }
                found = {}
                for name, run in runs.items():
                    began = time.perf_counter()
                    found[name] = run()
                    timings[name].append(time.perf_counter() - began)
                reference = set(found["numpy_in_memory"])
                agree = agree and all(set(ids) == reference for ids in found.values())
            results[str(window)] = {name: percentiles(samples) for name, samples in timings.items()}
        conn.close()
    fastest = {window: min(methods, key=lambda name: methods[name]["p50_ms"]) for window, methods in results.items()}
    print(
        json.dumps(
            {
                "rows": args.rows,
                "dimensions": DIMENSIONS,
                "top": TOP,
                "repeats": args.repeats,
                "build_s": round(build_s, 1),
                "same_top_100": agree,
                "windows": results,
                "fastest": fastest,
                "sqlite_vec": sqlite_vec.__version__ if hasattr(sqlite_vec, "__version__") else None,
                "load_average_1min": round(os.getloadavg()[0], 2),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
