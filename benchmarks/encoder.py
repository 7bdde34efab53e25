"""The local encoders (ONNX fp32 and int8, OpenVINO bf16) against fp32 sentence-transformers, all from one run.

    python benchmarks/encoder.py [--shared-data DIR] [--questions 300] [--cli-runs 7] [--http-runs 50] [--runs 1]

Texts are LoCoMo (``locomo-dev5.json``): its questions for query embeddings, its dialogue turns
(``"<speaker>: <text>"``, as the eval's way (a) stores them) for backfill. Prints JSON:

- ``query_embedding`` — p50/p95 ms of one question's embedding (``Embedder.embed_query``) for each fast
  encoder (``onnx-fp32``, ``onnx-int8``, and ``openvino-bf16`` where the ``openvino`` package is installed)
  and for fp32 on one torch thread (what the service uses for queries), alternating question by
  question so both see the same machine;
- ``backfill`` — chunks/s of: a plain fp32 ``SentenceTransformer.encode`` with torch's default threads;
  the fast encoder's own encode on every core (``embed_documents``, as the indexer calls it, so with
  ``sentences = "mean"``, the default, the turns' sentences); ``Obsmem.index(every_core=True)`` (chunk, embed, write,
  build and publish the graph) of the same turns with the fast encoder; and ``over_own_encode``, the
  backfill time over the fast encoder's own encode time;
- ``one_shot_index`` — ``obsmem index PROJECT`` in a new process over the same turns: wall time, process
  start (``obsmem index --help``: interpreter and imports), model load (measured in this process on a
  warm file cache) and the rest (encode, write, graph);
- ``cli_hybrid_search`` — wall time of a one-shot ``obsmem search --mode hybrid`` on the bundled sample,
  beside the fp32 encode of the question alone (model already loaded, one thread);
- ``http_hybrid_search`` — a hybrid search over HTTP (``obsmem serve``, fast encoder, one client) beside
  the same fp32 encode.

The fast encoder is built first (outside every timing) into ``--cache-dir`` (default: the usual cache).
With ``--runs N`` the query embeddings and the backfill are measured N times in turn, each run with the
load average at its start, and ``medians`` gives the median of each run's figures and same-run ratios
(on a shared machine the ratios hold better than the absolute figures).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from semantic_corpus import DEFAULT_SHARED, ingest  # noqa: E402

from obsmem import Obsmem  # noqa: E402
from obsmem.indexer.embed_local import LocalEmbedder  # noqa: E402
from obsmem.indexer.embed_onnx import OnnxEmbedder  # noqa: E402
from obsmem.indexer.embedders import make_embedder  # noqa: E402
from obsmem.indexer.engine import pin_math_threads  # noqa: E402
from obsmem.sample import SAMPLE_PROJECT, load_sample, questions  # noqa: E402
from obsmem.settings import EmbeddingSettings, load_settings  # noqa: E402

DEFAULT_ENCODER = EmbeddingSettings().encoder

OBSMEM = [sys.executable, "-m", "obsmem.surfaces.cli"]


def ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p95_ms": round(ordered[max(0, int(len(ordered) * 0.95) - 1)] * 1000, 2),
        "n": len(ordered),
    }


def locomo(shared: Path) -> tuple[list[str], list[str]]:
    asked: list[str] = []
    turns: list[str] = []
    for sample in json.loads((shared / "locomo" / "locomo-dev5.json").read_text()):
        asked.extend(str(item["question"]) for item in sample["qa"])
        for key, value in sample["conversation"].items():
            if key.startswith("session_") and isinstance(value, list):
                turns.extend(" ".join(f"{turn['speaker']}: {turn['text']}".split()) for turn in value)
    return asked, turns


def timed(function: Any, *args: Any) -> float:
    started = time.perf_counter()
    function(*args)
    return time.perf_counter() - started


def query_embedding(encoders: dict[str, Any], asked: list[str]) -> dict[str, Any]:
    """Each question embedded by every encoder in turn, so all see the same machine."""
    for text in asked[:20]:  # warm-up: sessions, first page faults
        for embedder in encoders.values():
            embedder.embed_query(text)
    times: dict[str, list[float]] = {name: [] for name in encoders}
    for text in asked[20:]:
        for name, embedder in encoders.items():
            times[name].append(timed(embedder.embed_query, text))
    result: dict[str, Any] = {name: ms(samples) for name, samples in times.items()}
    reference = result["torch_fp32_one_thread"]["p50_ms"]
    result["torch_fp32_over"] = {name: round(reference / result[name]["p50_ms"], 2) for name in encoders}
    return result


def backfill(fast: dict[str, Any], settings: dict[str, Any], turns: list[str], work: Path) -> dict[str, Any]:
    from sentence_transformers import SentenceTransformer

    default = fast[settings["embedding"].get("encoder", DEFAULT_ENCODER)]
    model = SentenceTransformer(str(default.path), device="cpu", local_files_only=True)
    import torch

    torch.set_num_threads(os.cpu_count() or 1)  # torch's default: one thread per core
    model.encode(turns[:64], batch_size=32, show_progress_bar=False)
    plain = timed(lambda: model.encode(turns, batch_size=32, show_progress_bar=False))
    own: dict[str, float] = {}
    for name, embedder in fast.items():
        with embedder.every_core():
            embedder.embed_documents(turns[:64])
            # embed_documents, as the indexer calls it: with sentence vectors (the default) a turn of several
            # sentences is embedded sentence by sentence, so the backfill and this encode do the same work
            own[name] = timed(lambda embedder=embedder: embedder.embed_documents(turns))
    data = work / "backfill"
    with Obsmem(load_settings(data_dir=data, semantic=settings)) as service:
        ingest(service, "bench", turns)
        embedder = service.indexer.project("bench").embedder
        with embedder.every_core():
            embedder.embed_batch(turns[:64], purpose="documents")  # load outside the timing
        started = time.perf_counter()
        report = service.index("bench", every_core=True)
        indexed = time.perf_counter() - started
    count = report.totals.chunks_embedded
    encoder = default.encoder
    return {
        "chunks": count,
        "threads": os.cpu_count(),
        "encoder": encoder,
        "fp32_plain_encode_chunks_per_s": round(len(turns) / plain, 1),
        "own_encode_chunks_per_s": {name: round(len(turns) / seconds, 1) for name, seconds in own.items()},
        "own_encode_over_fp32_plain": {name: round(plain / seconds, 2) for name, seconds in own.items()},
        "backfill_chunks_per_s": round(count / indexed, 1),
        "backfill_over_fp32_plain": round((count / indexed) / (len(turns) / plain), 2),
        "backfill_over_own_encode": round(indexed / own[encoder], 3),
        "seconds": {"fp32_plain": round(plain, 2), "backfill": round(indexed, 2)}
        | {f"own_encode_{name}": round(seconds, 2) for name, seconds in own.items()},
    }


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median over runs of every number in the first run's figures (same keys in every run)."""

    def walk(parts: list[Any]) -> Any:
        first = parts[0]
        if isinstance(first, dict):
            return {key: walk([part[key] for part in parts]) for key in first if key not in ("encoder", "n")}
        if isinstance(first, int | float) and not isinstance(first, bool):
            return round(statistics.median(parts), 3)
        return first

    return walk(runs)


def one_shot_index(config: Path, turns: list[str], settings: dict[str, Any], work: Path) -> dict[str, Any]:
    data = work / "one-shot"
    with Obsmem(load_settings(data_dir=data, semantic=settings)) as service:
        ingest(service, "bench", turns)
    base = [*OBSMEM, "--config", str(config), "--data-dir", str(data)]
    start = statistics.median(
        timed(lambda: subprocess.run([*base, "index", "--help"], check=True, capture_output=True)) for _ in range(3)
    )
    load_started = time.perf_counter()
    embedder = make_embedder(EmbeddingSettings(**settings["embedding"]))  # the encoder the index uses
    with embedder.every_core():
        embedder.embed_batch(["load"], purpose="documents")
    model_load = time.perf_counter() - load_started
    started = time.perf_counter()
    done = subprocess.run([*base, "index", "bench", "--json", "--no-progress"], capture_output=True, check=True)
    wall = time.perf_counter() - started
    summary = json.loads(done.stdout)
    return {
        "chunks": summary["chunks_embedded"],
        "wall_s": round(wall, 2),
        "process_start_s": round(start, 2),
        "model_load_s": round(model_load, 2),
        "index_s": round(wall - start - model_load, 2),
        "index_chunks_per_s": round(summary["chunks_embedded"] / max(wall - start - model_load, 1e-9), 1),
    }


def sample_data(config: Path, settings: dict[str, Any], work: Path) -> Path:
    data = work / "sample"
    with Obsmem(load_settings(data_dir=data, semantic=settings)) as service:
        load_sample(service.database(SAMPLE_PROJECT, create=True))
        service.index(SAMPLE_PROJECT, every_core=True)
    return data


def fp32_question_encode(fp32: LocalEmbedder, asked: list[str]) -> dict[str, float]:
    return ms([timed(fp32.embed_query, text) for text in asked])


def cli_search(config: Path, data: Path, asked: list[str], runs: int) -> dict[str, Any]:
    base = [*OBSMEM, "--config", str(config), "--data-dir", str(data), "search", SAMPLE_PROJECT]
    walls, stderr = [], ""
    for text in asked[: runs + 1]:
        started = time.perf_counter()
        done = subprocess.run([*base, text, "--mode", "hybrid", "--json"], capture_output=True, check=True, text=True)
        walls.append(time.perf_counter() - started)
        stderr += done.stderr
    return {"wall": ms(walls[1:]), "stderr_bytes": len(stderr)}  # the first run warms the file cache


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_search(config: Path, data: Path, asked: list[str], runs: int) -> dict[str, Any]:
    import httpx

    port = free_port()
    server = subprocess.Popen(
        [*OBSMEM, "--config", str(config), "--data-dir", str(data), "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=url, timeout=30) as client:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    if client.get("/v1/health").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.1)
            path = f"/v1/projects/{SAMPLE_PROJECT}/search"
            for text in asked[:10]:
                client.post(path, json={"query": text, "mode": "hybrid"}).raise_for_status()
            times = []
            for text in asked[10 : 10 + runs]:
                started = time.perf_counter()
                client.post(path, json={"query": text, "mode": "hybrid"}).raise_for_status()
                times.append(time.perf_counter() - started)
        return ms(times)
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shared-data", type=Path, default=DEFAULT_SHARED)
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--cli-runs", type=int, default=7)
    parser.add_argument("--http-runs", type=int, default=50)
    parser.add_argument("--cache-dir", default="")
    parser.add_argument("--encoder", default=DEFAULT_ENCODER, help="the fast encoder Obsmem indexes and searches with")
    parser.add_argument("--turns", type=int, default=0, help="backfill only the first N turns (0: all 2,760)")
    parser.add_argument("--runs", type=int, default=1, help="measure query embeddings and backfill this many times")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: backfill, index, cli, http")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    pin_math_threads()
    asked, turns = locomo(args.shared_data)
    turns = turns[: args.turns] if args.turns else turns
    work = Path(tempfile.mkdtemp(prefix="obsmem-encoder-"))
    embedding = ({"cache_dir": args.cache_dir} if args.cache_dir else {}) | {"encoder": args.encoder}
    settings = {"embedding": embedding, "index": {"background": False}}
    config = work / "obsmem.toml"
    config.write_text(
        f'[semantic]\n[semantic.embedding]\nencoder = "{args.encoder}"\n'
        + (f'cache_dir = "{args.cache_dir}"\n' if args.cache_dir else "")
    )
    cache = {"cache_dir": args.cache_dir} if args.cache_dir else {}
    fast: dict[str, Any] = {
        name: OnnxEmbedder(EmbeddingSettings(**cache, encoder=name)) for name in ("onnx-int8", "onnx-fp32")
    }
    if importlib.util.find_spec("openvino") is not None:  # optional: the openvino extra
        fast["openvino-bf16"] = make_embedder(EmbeddingSettings(**cache, encoder="openvino-bf16"))
    built = {name: embedder.built() for name, embedder in fast.items()}
    fp32 = LocalEmbedder(EmbeddingSettings(encoder="torch-fp32"))
    result: dict[str, Any] = {
        "benchmark": "encoder",
        "cpu_count": os.cpu_count(),
        "load_average_1min_start": round(os.getloadavg()[0], 2),
        "default_encoder": DEFAULT_ENCODER,
        "encoder": args.encoder,
        "build_seconds": {name: entry.build_seconds for name, entry in built.items() if entry.built},
        "query_embedding": query_embedding({**fast, "torch_fp32_one_thread": fp32}, asked[: args.questions]),
    }
    if "backfill" not in skip:
        result["backfill"] = backfill(fast, settings, turns, work / "run-1")
    if args.runs > 1:
        runs = [{"load_average_1min": result["load_average_1min_start"], "query_embedding": result["query_embedding"]}]
        runs[0] |= {"backfill": result["backfill"]} if "backfill" in result else {}
        for number in range(2, args.runs + 1):
            run: dict[str, Any] = {"load_average_1min": round(os.getloadavg()[0], 2)}
            run["query_embedding"] = query_embedding({**fast, "torch_fp32_one_thread": fp32}, asked[: args.questions])
            if "backfill" not in skip:
                run["backfill"] = backfill(fast, settings, turns, work / f"run-{number}")
            runs.append(run)
        result["runs"] = runs
        result["medians"] = medians(runs)
    if "index" not in skip:
        result["one_shot_index"] = one_shot_index(config, turns, settings, work)
    sample_questions = [str(item["question"]) for item in questions()]
    fp32_alone = fp32_question_encode(fp32, sample_questions)
    if "cli" not in skip or "http" not in skip:
        data = sample_data(config, settings, work)
        result["fp32_question_encode_alone"] = fp32_alone
        if "cli" not in skip:
            result["cli_hybrid_search"] = cli_search(config, data, sample_questions, args.cli_runs)
        if "http" not in skip:
            result["http_hybrid_search"] = http_search(config, data, sample_questions, args.http_runs)
    result["load_average_1min_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
