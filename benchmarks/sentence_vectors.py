"""What sentence vectors cost to encode: the same texts embedded whole and sentence by sentence, in turn.

    python benchmarks/sentence_vectors.py [--shared-data DIR] [--turns 0] [--rounds 5] [--encoder onnx-fp32]

The texts are LoCoMo's dialogue turns as the eval's way (a) stores them (``"<speaker>: <text>"``, the
texts ``benchmarks/encoder.py`` backfills). One embedder per setting of ``[semantic.embedding] sentences``
(``whole`` and ``mean``), both on every core as a backfill runs; each round encodes all the turns with one
and then the other, so both see the same machine. Prints JSON: the pieces the turns become, the median
seconds and chunks/s of each setting over the rounds, and ``mean_over_whole``, the median of the rounds'
time ratios (on a shared machine the same-round ratio holds better than either figure).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from encoder import locomo  # noqa: E402
from semantic_corpus import DEFAULT_SHARED  # noqa: E402

from obsmem.indexer.embedders import make_embedder  # noqa: E402
from obsmem.indexer.engine import pin_math_threads  # noqa: E402
from obsmem.indexer.sentences import sentence_pieces, split_for_embedding  # noqa: E402
from obsmem.settings import EmbeddingSettings  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shared-data", type=Path, default=DEFAULT_SHARED)
    parser.add_argument("--turns", type=int, default=0, help="only the first N turns (0: all 2,760)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--encoder", default=EmbeddingSettings().encoder)
    args = parser.parse_args()
    pin_math_threads()
    _, turns = locomo(args.shared_data)
    turns = turns[: args.turns] if args.turns else turns
    embedders = {
        way: make_embedder(EmbeddingSettings(encoder=args.encoder, sentences=way)) for way in ("whole", "mean")
    }
    for embedder in embedders.values():
        with embedder.every_core():
            embedder.embed_documents(turns[:64])  # load and warm outside the timing
    seconds: dict[str, list[float]] = {way: [] for way in embedders}
    for _ in range(args.rounds):
        for way, embedder in embedders.items():
            with embedder.every_core():
                started = time.perf_counter()
                embedder.embed_documents(turns)
                seconds[way].append(time.perf_counter() - started)
    pieces, _ = split_for_embedding(turns)
    ratios = [mean / whole for mean, whole in zip(seconds["mean"], seconds["whole"], strict=True)]
    print(
        json.dumps(
            {
                "benchmark": "sentence_vectors",
                "encoder": args.encoder,
                "turns": len(turns),
                "pieces_with_mean": len(pieces),
                "turns_cut_into_sentences": sum(1 for text in turns if sentence_pieces(text) != [text]),
                "load_average_1min": round(os.getloadavg()[0], 2),
                "seconds_p50": {way: round(statistics.median(values), 2) for way, values in seconds.items()},
                "chunks_per_s": {
                    way: round(len(turns) / statistics.median(values), 1) for way, values in seconds.items()
                },
                "mean_over_whole": round(statistics.median(ratios), 3),
                "mean_over_whole_range": [round(min(ratios), 3), round(max(ratios), 3)],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
