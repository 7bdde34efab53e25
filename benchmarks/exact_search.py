"""Exact-search latency against a plain LIKE scan, on synthetic corpora of 50k and 1M observations.

    python benchmarks/exact_search.py --sizes 50000 1000000 --repeat 30 --out bench-out

Prints one JSON document. For each corpus size and query it reports the median and p95 latency of
obsmem's exact search (limit 20) and of ``SELECT ... WHERE content LIKE ? ESCAPE '\\' ORDER BY date
DESC, id DESC LIMIT 21`` on the same database, the plan obsmem chose, the speed-up, and whether both
returned the same memories. Corpora are cached under ``--out`` so repeated runs skip the load.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import rows  # noqa: E402

from obsmem.dates import parse_window  # noqa: E402
from obsmem.projects import ProjectRegistry  # noqa: E402
from obsmem.retrieval.exact import ExactSearcher, like_pattern  # noqa: E402
from obsmem.retrieval.results import HIT_COLUMNS  # noqa: E402

QUERIES = {
    "rare_identifier": ["MapToolArguments", "2510", "#2510", "maptoolarguments in"],
    "common_word": ["error", "the", "retry", "login session"],
    "two_characters": ["db", "42", "Ke", "qz"],
}
LIMIT = 20


def build(registry: ProjectRegistry, name: str, count: int) -> None:
    if registry.exists(name):
        return
    db = registry.get(name, create=True)
    batch: list[tuple[str, str, str]] = []
    sessions: set[str] = set()

    def flush() -> None:
        with db.write() as conn:
            for session in {s for s, _, _ in batch} - sessions:
                conn.execute("INSERT INTO sessions VALUES (?, 'x', 'x', 1, 1)", (session,))
                conn.execute(
                    "INSERT INTO events(session_id, seq, role, type, content, created_at, fingerprint)"
                    " VALUES (?, 1, 'user', 'message', 'x', 'x', 'x')",
                    (session,),
                )
                sessions.add(session)
            start = conn.execute("SELECT coalesce(max(id), 0) FROM memories").fetchone()[0]
            conn.executemany(
                "INSERT INTO memories(id, memory_id, kind, session_id, content, date, importance, created_at)"
                " VALUES (?, ?, 'observation', ?, ?, ?, 'medium', 'x')",
                [(start + i + 1, f"{start + i + 1:064x}", s, c, d) for i, (s, d, c) in enumerate(batch)],
            )
            conn.executemany(
                "INSERT INTO observation_sources VALUES (?, ?, 1)",
                [(start + i + 1, s) for i, (s, _, _) in enumerate(batch)],
            )
        batch.clear()

    for row in rows(count):
        batch.append(row)
        if len(batch) == 20_000:
            flush()
    if batch:
        flush()
    db.connection().execute("INSERT INTO memory_trigrams(memory_trigrams) VALUES ('optimize')")
    db.connection().execute("PRAGMA optimize")


def timed(fn, repeat: int) -> tuple[list[float], object]:  # type: ignore[no-untyped-def]
    result = fn()  # warm-up, and the answer we compare
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return samples, result


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered), 3),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 3),
    }


def run_size(registry: ProjectRegistry, count: int, repeat: int) -> dict[str, object]:
    name = f"bench-exact-{count}"
    started = time.perf_counter()
    build(registry, name, count)
    load_s = time.perf_counter() - started
    conn = registry.get(name).connection()
    searcher = ExactSearcher(conn)
    window = parse_window()
    like_sql = (
        f"SELECT {HIT_COLUMNS} FROM memories AS m WHERE m.content LIKE ? ESCAPE '\\'"
        " ORDER BY m.date DESC, m.id DESC LIMIT ?"
    )
    results: dict[str, list[dict[str, object]]] = {}
    for query_class, queries in QUERIES.items():
        for query in queries:
            ours, (hits, truncated) = timed(lambda q=query: searcher.search(q, window, LIMIT), repeat)
            like, like_rows = timed(
                lambda q=query: conn.execute(like_sql, (like_pattern(q), LIMIT + 1)).fetchall(), max(3, repeat // 5)
            )
            same = [h.memory_id for h in hits] == [r[0] for r in like_rows[:LIMIT]] and truncated == (
                len(like_rows) > LIMIT
            )
            entry = {
                "query": query,
                "plan": searcher.last_plan.name if searcher.last_plan else None,
                "hits": len(hits),
                "truncated": truncated,
                "obsmem": summary(ours),
                "like_scan": summary(like),
                "speedup_p50": round(statistics.median(like) / max(statistics.median(ours), 1e-6), 1),
                "identical_results": same,
            }
            results.setdefault(query_class, []).append(entry)
    return {"observations": count, "load_s": round(load_s, 1), "queries": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50_000, 1_000_000])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    args = parser.parse_args()
    registry = ProjectRegistry(args.out)
    report = {
        "benchmark": "exact_search",
        "limit": LIMIT,
        "sizes": [run_size(registry, n, args.repeat) for n in args.sizes],
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
