"""Rerankers: score (query, candidate chunk) pairs; the fused order breaks ties.

:class:`Reranker` implementations provide ``score_batch`` (one batch of documents -> one score each);
the base class cuts documents to ``document_characters``, batches them, and validates every score
(a finite number, one per document). Any failure raises ``reranker_unavailable``: search never skips a
configured reranker silently.

The HTTP reranker posts ``{"model", "query", "documents", "top_n"}`` to ``<base_url>/rerank`` and
accepts the common reply shapes: ``{"results": [{"index", "relevance_score"}]}`` (Cohere, Jina,
llama.cpp, vLLM), the same under ``"data"``, a bare list of ``{"index", "score"}`` (text-embeddings-
inference), or ``{"scores": [..]}`` in document order. Indices must cover each document exactly once.
"""

from __future__ import annotations

import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from obsmem.errors import ConfigurationError, RerankerUnavailable
from obsmem.outbound import JsonEndpoint, OutboundError
from obsmem.settings import RerankerSettings


def _finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def parse_rerank_reply(reply: Any, count: int) -> list[float]:
    """Scores in document order from any accepted reply shape; raises RerankerUnavailable otherwise."""
    if isinstance(reply, dict) and "scores" in reply and not any(k in reply for k in ("results", "data")):
        scores = reply["scores"]
        if not isinstance(scores, list) or len(scores) != count or not all(_finite_number(s) for s in scores):
            raise RerankerUnavailable("reranker reply is malformed: 'scores' is not one finite number per document")
        return [float(s) for s in scores]
    if isinstance(reply, list):
        items = reply
    elif isinstance(reply, dict) and isinstance(reply.get("results"), list):
        items = reply["results"]
    elif isinstance(reply, dict) and isinstance(reply.get("data"), list):
        items = reply["data"]
    else:
        raise RerankerUnavailable("reranker reply is malformed: no results list")
    if len(items) != count:
        raise RerankerUnavailable(f"reranker returned {len(items)} scores for {count} documents")
    scores: list[float | None] = [None] * count
    for item in items:
        if not isinstance(item, dict):
            raise RerankerUnavailable("reranker reply is malformed: a result is not an object")
        index = item.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
            raise RerankerUnavailable("reranker reply is malformed: an index is missing or out of range")
        if scores[index] is not None:
            raise RerankerUnavailable("reranker reply is malformed: an index appears twice")
        score = item.get("relevance_score", item.get("score"))
        if not _finite_number(score):
            raise RerankerUnavailable("reranker reply is malformed: a score is missing or not a finite number")
        scores[index] = float(score)
    return [s for s in scores if s is not None]


class Reranker(ABC):
    def __init__(self, settings: RerankerSettings) -> None:
        self.settings = settings

    @abstractmethod
    def score_batches(self, query: str, batches: list[list[str]]) -> list[list[float]]:
        """Scores for each batch of documents (same shapes)."""

    def score(self, query: str, documents: Sequence[str]) -> list[float]:
        cut = [doc[: self.settings.document_characters] for doc in documents]
        size = self.settings.batch_size
        batches = [cut[i : i + size] for i in range(0, len(cut), size)]
        if not batches:
            return []
        results = self.score_batches(query, batches)
        scores: list[float] = []
        for batch, result in zip(batches, results, strict=True):
            if len(result) != len(batch) or not all(_finite_number(s) for s in result):
                raise RerankerUnavailable("the reranker did not return one finite score per document")
            scores.extend(float(s) for s in result)
        return scores

    def close(self) -> None:  # noqa: B027 (an optional hook: most providers hold nothing)
        """Release models or connections."""


class HttpReranker(Reranker):
    def __init__(self, settings: RerankerSettings) -> None:
        super().__init__(settings)
        assert settings.base_url and settings.model_id  # checked by the settings
        self.endpoint = JsonEndpoint(
            settings.base_url,
            "/rerank",
            timeout_seconds=settings.timeout_seconds,
            api_key_env=settings.api_key_env,
            label="reranker",
        )

    def score_batches(self, query: str, batches: list[list[str]]) -> list[list[float]]:
        payloads = [
            {"model": self.settings.model_id, "query": query, "documents": batch, "top_n": len(batch)}
            for batch in batches
        ]
        try:
            replies = self.endpoint.post_many(payloads, concurrency=self.settings.max_concurrent_requests)
        except OutboundError as exc:
            raise RerankerUnavailable(exc.message, details={"stage": exc.stage}) from None
        return [parse_rerank_reply(reply, len(batch)) for reply, batch in zip(replies, batches, strict=True)]

    def close(self) -> None:
        self.endpoint.close()


class LocalCrossEncoder(Reranker):
    """A sentence-transformers cross-encoder loaded from a local directory (never downloaded)."""

    def __init__(self, settings: RerankerSettings) -> None:
        super().__init__(settings)
        self.path = Path(settings.model).expanduser()
        if not self.path.is_dir():
            raise ConfigurationError(f"semantic.reranker.model: no model directory at {self.path}")
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        if self._model is None:
            try:
                from sentence_transformers import CrossEncoder

                self._model = CrossEncoder(str(self.path), device="cpu", local_files_only=True)
            except Exception as exc:
                raise RerankerUnavailable(f"cannot load the local reranker ({type(exc).__name__})") from None
        return self._model

    def score_batches(self, query: str, batches: list[list[str]]) -> list[list[float]]:
        with self._lock:
            model = self._load()
            try:
                return [
                    [
                        float(s)
                        for s in model.predict(
                            [(query, doc) for doc in batch], batch_size=len(batch), show_progress_bar=False
                        )
                    ]
                    for batch in batches
                ]
            except Exception as exc:
                raise RerankerUnavailable(f"the local reranker failed ({type(exc).__name__})") from None


def make_reranker(settings: RerankerSettings | None) -> Reranker | None:
    if settings is None:
        return None
    if settings.provider == "http":
        return HttpReranker(settings)
    return LocalCrossEncoder(settings)


def rerank_order(scores: Sequence[float], min_score: float | None) -> list[int]:
    """Positions by score, best first; equal scores keep their fused order; below the floor dropped."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    if min_score is not None:
        order = [i for i in order if scores[i] >= min_score]
    return order
