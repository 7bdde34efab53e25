"""Exact conversation search latency (``memory_search`` with scope ``conversation``) against a LIKE scan.

    python benchmarks/conversation_exact.py --sizes 1000000 --repeat 30 --unindexed 0 5000 --out bench-out

Prints one JSON document. The corpus is ``benchmarks/corpus.py``'s lines stored as conversation events
(every fifth one a tool call whose arguments hold the line, the rest messages), bulk-inserted the way an
import writes them (the schema's triggers fill the indexing markers), then indexed by the catch-up the
workers' housekeeping runs (``obsmem.events.index_event_trigrams``): first all but the newest
``--unindexed`` events (largest value first), measured, then the next value, down to the whole corpus
(0); a tail left out shows what the search's direct scan of the unindexed events costs. For each
query it reports the median and p95 latency of obsmem's exact search over events (limit 20) and of the
plain ``content LIKE ? OR tool_args LIKE ?`` scan newest first, the plan obsmem chose, and whether both
returned the same events. Corpora are cached under ``--out`` so repeated runs skip the load.
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
from exact_search import LIMIT, QUERIES, summary, timed  # noqa: E402

from obsmem.dates import parse_window  # noqa: E402
from obsmem.events import index_event_trigrams  # noqa: E402
from obsmem.projects import ProjectRegistry  # noqa: E402
from obsmem.retrieval.corpus import EVENTS  # noqa: E402
from obsmem.retrieval.exact import ExactSearcher, like_pattern  # noqa: E402

BATCH = 20_000
TOOL_EVERY = 5


def build(registry: ProjectRegistry, name: str, count: int) -> None:
    """Store the corpus (unless cached), unindexed."""
    if registry.exists(name):
        return
    db = registry.get(name, create=True)
    seqs: dict[str, int] = {}
    batch: list[tuple[object, ...]] = []

    def flush() -> None:
        with db.write() as conn:
            fresh = {row[0] for row in batch if row[1] == 1}
            conn.executemany(
                "INSERT INTO sessions(session_id, created_at, updated_at) VALUES (?, 'x', 'x')",
                [(session,) for session in sorted(fresh)],
            )
            conn.executemany(
                "INSERT INTO events(session_id, seq, role, type, content, tool_name, tool_args, created_at,"
                " fingerprint) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'x')",
                batch,
            )
        batch.clear()

    for index, (session, date, line) in enumerate(rows(count)):
        seq = seqs[session] = seqs.get(session, 0) + 1
        stamp = date.replace(" ", "T") + ".000Z"
        if index % TOOL_EVERY == 0:
            args = json.dumps({"command": line}, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
            row = (session, seq, "assistant", "tool_call", "", "bash", args, stamp)
        else:
            row = (session, seq, "user", "message", line, None, None, stamp)
        batch.append(row)
        if len(batch) == BATCH:
            flush()
    if batch:
        flush()


def index_up_to(registry: ProjectRegistry, name: str, unindexed: int) -> float:
    """Index the corpus up to its newest ``unindexed`` events (never backwards); returns the seconds."""
    db = registry.get(name)
    total, through = db.query("SELECT count(*), (SELECT indexed_through FROM event_trigram_progress) FROM events")[0]
    started = time.perf_counter()
    index_event_trigrams(db, max_events=max(0, total - unindexed - through))
    db.connection().execute("INSERT INTO event_trigrams(event_trigrams) VALUES ('optimize')")
    db.connection().execute("PRAGMA optimize")
    return time.perf_counter() - started


def run_size(registry: ProjectRegistry, count: int, repeat: int, tails: list[int]) -> list[dict[str, object]]:
    name = f"bench-conversation-{count}"
    started = time.perf_counter()
    build(registry, name, count)
    load_s = time.perf_counter() - started
    runs = []
    for unindexed in sorted(set(tails), reverse=True):
        index_s = index_up_to(registry, name, unindexed)
        runs.append(run_queries(registry, name, repeat) | {"load_s": round(load_s, 1), "index_s": round(index_s, 1)})
        runs[-1] |= {"events": count, "unindexed": unindexed}
    return runs


def run_queries(registry: ProjectRegistry, name: str, repeat: int) -> dict[str, object]:
    conn = registry.get(name).connection()
    searcher = ExactSearcher(conn, corpus=EVENTS)
    window = parse_window()
    like_sql = (
        "SELECT obsmem_event_id(m.session_id, m.seq) FROM events AS m"
        " WHERE m.content LIKE ?1 ESCAPE '\\' OR m.tool_args LIKE ?1 ESCAPE '\\'"
        " ORDER BY m.created_at DESC, m.id DESC LIMIT ?2"
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
            results.setdefault(query_class, []).append(
                {
                    "query": query,
                    "plan": searcher.last_plan.name if searcher.last_plan else None,
                    "hits": len(hits),
                    "truncated": truncated,
                    "obsmem": summary(ours),
                    "like_scan": summary(like),
                    "speedup_p50": round(statistics.median(like) / max(statistics.median(ours), 1e-6), 1),
                    "identical_results": same,
                }
            )
    return {"queries": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--unindexed", type=int, nargs="+", default=[0], help="events left out of the index")
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    args = parser.parse_args()
    registry = ProjectRegistry(args.out)
    report = {
        "benchmark": "conversation_exact",
        "limit": LIMIT,
        "runs": [run for n in args.sizes for run in run_size(registry, n, args.repeat, args.unindexed)],
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
