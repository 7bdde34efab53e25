"""Build a project with a million indexed chunks from real embeddings, cheaply, for the query benchmark.

    python benchmarks/semantic_million.py --source DIR --data-dir OUT [--chunks 1000000]

Embedding a million texts with the local model would take days on two cores, so the vectors are made
from real ones instead: ``--source`` is a data directory indexed by semantic_backfill.py, and chunk ``i``
joins two of its chunk texts, with the normalised sum of their two real embeddings as its vector (never
random Gaussian vectors, which make HNSW look broken). Memories, chunks and embeddings are written
straight into the tables, the contextual keyword rows are built by the indexer's own keyword rebuild
(timed: what an upgrade of an existing index costs), then the graph is built by the normal maintenance
path and published. Prints JSON with the build times; then run semantic_query.py on OUT with
``--project million``. With ``--tables-only`` it stops after writing the tables: enough for a source of
postgres_hybrid.py, which copies memories, chunks and embeddings and builds its own keyword rows and graph.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import apsw
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from semantic_corpus import timestamp  # noqa: E402

from obsmem import Obsmem  # noqa: E402
from obsmem.dates import now_iso, stored_minute  # noqa: E402
from obsmem.indexer.chunker import chunk_text  # noqa: E402
from obsmem.indexer.project import content_hash  # noqa: E402
from obsmem.indexer.state import bump_version, update_state  # noqa: E402
from obsmem.settings import load_settings  # noqa: E402

BLOCK = 50_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--source-project", default="bench")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--project", default="million")
    parser.add_argument("--chunks", type=int, default=1_000_000)
    parser.add_argument("--ef-construction", type=int, default=None)
    parser.add_argument(
        "--tables-only", action="store_true", help="no keyword rows, no graph: a copy source, not searchable"
    )
    args = parser.parse_args()
    source = apsw.Connection(
        f"file:{args.source / 'projects' / args.source_project / 'obsmem.db'}?mode=ro",
        flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI,
    )
    rows = source.execute(
        "SELECT c.text, v.embedding FROM semantic_chunks AS c JOIN semantic_vectors AS v ON v.chunk = c.id"
    ).fetchall()
    base_texts = [row[0] for row in rows]
    base = np.frombuffer(b"".join(row[1] for row in rows), dtype=np.float32).reshape(len(rows), -1)
    n = len(base_texts)
    index_settings: dict[str, object] = {"background": False}
    if args.ef_construction:
        index_settings["hnsw_ef_construction"] = args.ef_construction
    settings = load_settings(data_dir=args.data_dir, semantic={"index": index_settings})
    report: dict[str, object] = {"benchmark": "semantic_million", "chunks": args.chunks, "base_vectors": n}
    with Obsmem(settings) as service:
        sessions = 100
        for s in range(sessions):
            service.append_events(args.project, f"s{s}", [{"role": "user", "content": "e"}])
        index = service.indexer.project(args.project)
        index.ensure_compatible(adopt=True)
        db = service.database(args.project)
        with db.write() as conn:
            update_state(conn, dimensions=int(base.shape[1]))
        started = time.perf_counter()
        now = now_iso()
        first_row = 1 + max(
            db.query("SELECT coalesce(max(id), 0) FROM memories")[0][0],
            db.query("SELECT coalesce(max(id), 0) FROM semantic_chunks")[0][0],
        )
        for block in range(0, args.chunks, BLOCK):
            ids = range(block, min(block + BLOCK, args.chunks))
            a = np.array([i % n for i in ids])
            b = np.array([(i * 7919 + i // n + 1) % n for i in ids])
            vectors = base[a] + base[b]
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            memory_rows, source_rows, chunk_rows, vector_rows = [], [], [], []
            for offset, i in enumerate(ids):
                content = f"{base_texts[a[offset]]} {base_texts[b[offset]]}".encode()[:1100].decode(
                    "utf-8", errors="ignore"
                )
                memory_id = hashlib.sha256(f"synthetic-{i}".encode()).hexdigest()
                date = stored_minute(timestamp(i, args.chunks))
                session = f"s{i % sessions}"
                row = label = first_row + i  # explicit ids, so each table is one executemany
                [chunk] = chunk_text(memory_id, content, index.chunking)
                memory_rows.append((row, memory_id, session, content, date, now))
                source_rows.append((row, memory_id, content_hash(content)))
                chunk_rows.append((label, chunk.key, row, date, session, chunk.text))
                vector_rows.append((label, vectors[offset].tobytes()))
            with db.write() as conn:
                _, version = bump_version(conn)
                conn.executemany(
                    "INSERT INTO memories(id, memory_id, kind, session_id, content, date, importance, created_at)"
                    " VALUES (?, ?, 'observation', ?, ?, ?, 'medium', ?)",
                    memory_rows,
                )
                conn.executemany(
                    "INSERT INTO semantic_sources(memory_row, memory_id, content_hash, chunk_count)"
                    " VALUES (?, ?, ?, 1)",
                    source_rows,
                )
                conn.executemany(
                    "INSERT INTO semantic_chunks(id, chunk_key, memory_row, position, date, session_id, text)"
                    " VALUES (?, ?, ?, 0, ?, ?, ?)",
                    chunk_rows,
                )
                conn.executemany("INSERT INTO semantic_vectors(chunk, embedding) VALUES (?, ?)", vector_rows)
                conn.execute("DELETE FROM semantic_pending")
                update_state(conn, version=version)
            print(f"{block + len(ids)} chunks written", file=sys.stderr, flush=True)
        report["write_seconds"] = round(time.perf_counter() - started, 1)
        if args.tables_only:
            print(json.dumps(report, indent=2))
            return
        started = time.perf_counter()
        with db.write() as conn:
            index.keywords.create(conn)
        report["keyword_rebuild_seconds"] = round(time.perf_counter() - started, 1)
        started = time.perf_counter()
        vectors_set = index.vectors()
        report["load_seconds"] = round(time.perf_counter() - started, 1)
        started = time.perf_counter()
        index.maintain()
        report["graph_build_and_publish_seconds"] = round(time.perf_counter() - started, 1)
        report["graph"] = vectors_set.graph is not None
        report["live"] = vectors_set.live
        report["hnsw"] = {
            "M": settings.semantic.index.hnsw_m,
            "ef_construction": settings.semantic.index.hnsw_ef_construction,
        }
        report["database_bytes"] = db.path.stat().st_size
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
