"""Embedders: text -> unit-length float32 vectors.

An embedder implements one method, :meth:`Embedder.embed_batch` (a list of texts in, one vector per text
out). The base class does everything else once for all providers: cutting work into requests of the
right size, applying the query prefix, and validating every reply — the right count, the right
dimensions, finite numbers and a non-zero norm — before anything is normalised or stored. A reply that
fails any check raises :class:`~obsmem.errors.EmbeddingUnavailable` for the whole call, so nothing from
a bad reply is ever indexed.

Providers: :class:`~obsmem.indexer.embed_onnx.OnnxEmbedder` (the local model's ONNX build, fp32 by
default or int8), :class:`~obsmem.indexer.embed_openvino.OpenVinoEmbedder` (the same ONNX build run by
OpenVINO in bf16), :class:`~obsmem.indexer.embed_local.LocalEmbedder` (sentence-transformers in fp32) and
:class:`~obsmem.indexer.embed_openai.OpenAIEmbedder` (an OpenAI-compatible ``/embeddings`` endpoint).
:func:`make_embedder` builds the configured one.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from obsmem.errors import EmbeddingUnavailable
from obsmem.indexer.sentences import mean_of_pieces, split_for_embedding
from obsmem.settings import EmbeddingSettings

Vectors = np.ndarray  # (n, dimensions) float32, rows of unit length


class Embedder(ABC):
    """Base class: batching, the query prefix and validation around :meth:`embed_batch`."""

    #: Texts per :meth:`embed_batch` call.
    request_size: int = 32

    def __init__(
        self,
        *,
        query_prefix: str = "",
        dimensions: int | None = None,
        sentences: str = EmbeddingSettings.model_fields["sentences"].default,  # one default, the settings'
    ) -> None:
        self.query_prefix = query_prefix
        self.expected_dimensions = dimensions
        self._dimensions: int | None = dimensions
        #: "whole": a chunk is embedded as one text; "mean": sentence by sentence, averaged (indexer/sentences.py).
        self.sentences = sentences

    @property
    @abstractmethod
    def identity(self) -> str:
        """What decides the vectors (provider and model), recorded in the index signature."""

    @abstractmethod
    def embed_batch(self, texts: list[str], *, purpose: str) -> Any:
        """One vector per text, as an array or a list of lists. ``purpose`` is "documents" or "query"."""

    @property
    def dimensions(self) -> int | None:
        """The vector size, once known (configured, or learnt from the first valid reply)."""
        return self._dimensions

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        if self.sentences == "mean" and texts:
            pieces, owners = split_for_embedding(texts)
            if len(pieces) > len(texts):
                return mean_of_pieces(self._embed_texts(pieces), owners, len(texts))
        return self._embed_texts(texts)

    def _embed_texts(self, texts: Sequence[str]) -> Vectors:
        parts = [
            self._validated(
                self.embed_batch(list(texts[i : i + self.request_size]), purpose="documents"),
                len(texts[i : i + self.request_size]),
            )
            for i in range(0, len(texts), self.request_size)
        ]
        if not parts:
            return np.zeros((0, self._dimensions or 0), dtype=np.float32)
        return np.concatenate(parts)

    def known_words(self) -> frozenset[str] | None:
        """The model's whole words, lowercased (its tokenizer's vocabulary less word pieces and special
        tokens), or None when the model's vocabulary is not at hand (a remote service). Hybrid search asks it
        which capitalised words of a question the model can relate to others (retrieval/names.py)."""
        return None

    def embed_query(self, query: str) -> np.ndarray:
        return self.embed_queries([query])[0]

    def embed_queries(self, queries: Sequence[str]) -> Vectors:
        """Several queries' embeddings as one batch (hybrid search's two forms of one question)."""
        texts = [f"{self.query_prefix} {query}" if self.query_prefix else query for query in queries]
        return self._validated(self.embed_batch(texts, purpose="query"), len(texts))

    def _validated(self, raw: Any, count: int) -> Vectors:
        try:
            array = np.asarray(raw, dtype=np.float32)
        except (TypeError, ValueError):
            raise EmbeddingUnavailable("the embedding model returned something that is not a list of vectors") from None
        if array.ndim != 2 or array.shape[0] != count:
            raise EmbeddingUnavailable(
                f"the embedding model returned {array.shape[0] if array.ndim else 0} vectors for {count} texts"
                if array.ndim == 2
                else "the embedding model returned something that is not a list of vectors"
            )
        width = array.shape[1]
        expected = self._dimensions
        if expected is not None and width != expected:
            raise EmbeddingUnavailable(f"the embedding model returned {width}-dimensional vectors, expected {expected}")
        if width == 0:
            raise EmbeddingUnavailable("the embedding model returned empty vectors")
        if not np.isfinite(array).all():
            raise EmbeddingUnavailable("the embedding model returned a vector with a non-finite number")
        norms = np.linalg.norm(array.astype(np.float64), axis=1)
        if not (norms > 1e-12).all():
            raise EmbeddingUnavailable("the embedding model returned a zero vector")
        if expected is None:
            self._dimensions = width
        return (array / norms[:, None]).astype(np.float32)

    @contextlib.contextmanager
    def every_core(self) -> Iterator[None]:
        """Let indexing use every core while inside (nothing else in the process needs one). Local models
        only; an endpoint's cores are not ours to choose."""
        yield

    def close(self) -> None:  # noqa: B027 (an optional hook: most providers hold nothing)
        """Release models or connections."""


def make_embedder(settings: EmbeddingSettings) -> Embedder:
    if settings.provider == "openai":
        from obsmem.indexer.embed_openai import OpenAIEmbedder

        return OpenAIEmbedder(settings)
    if settings.encoder == "openvino-bf16":
        from obsmem.indexer.embed_openvino import OpenVinoEmbedder

        return OpenVinoEmbedder(settings)
    if settings.encoder.startswith("onnx-"):
        from obsmem.indexer.embed_onnx import OnnxEmbedder

        return OnnxEmbedder(settings)
    from obsmem.indexer.embed_local import LocalEmbedder

    return LocalEmbedder(settings)
