"""Embeddings from an OpenAI-compatible ``POST <base_url>/embeddings`` endpoint.

Request: ``{"model", "input": [texts], "encoding_format": "float"}``. The reply must be
``{"data": [{"index": i, "embedding": [numbers]}, ...]}`` with exactly one item per input and the indices
0..n-1 once each (in any order). Anything else is ``embedding_unavailable``; the base class then checks
dimensions, finiteness and norms.
"""

from __future__ import annotations

from typing import Any

from obsmem.errors import EmbeddingUnavailable
from obsmem.indexer.embedders import Embedder
from obsmem.outbound import JsonEndpoint, OutboundError
from obsmem.settings import EmbeddingSettings


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def parse_embeddings_reply(reply: Any, count: int) -> list[list[float]]:
    """The vectors of a reply in input order; raises EmbeddingUnavailable naming what is wrong."""
    if not isinstance(reply, dict) or not isinstance(reply.get("data"), list):
        raise EmbeddingUnavailable("embedding endpoint reply is malformed: no 'data' list")
    items = reply["data"]
    if len(items) != count:
        raise EmbeddingUnavailable(f"embedding endpoint returned {len(items)} vectors for {count} texts")
    vectors: list[list[float] | None] = [None] * count
    for position, item in enumerate(items):
        if not isinstance(item, dict):
            raise EmbeddingUnavailable("embedding endpoint reply is malformed: an item is not an object")
        index = item.get("index", position)
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
            raise EmbeddingUnavailable("embedding endpoint reply is malformed: an index is out of range")
        if vectors[index] is not None:
            raise EmbeddingUnavailable("embedding endpoint reply is malformed: an index appears twice")
        embedding = item.get("embedding")
        if not isinstance(embedding, list) or not all(_is_number(x) for x in embedding):
            raise EmbeddingUnavailable("embedding endpoint reply is malformed: an embedding is not a list of numbers")
        vectors[index] = embedding
    widths = {len(v) for v in vectors if v is not None}
    if len(widths) != 1:
        raise EmbeddingUnavailable("embedding endpoint returned vectors of different sizes")
    return [v for v in vectors if v is not None]


class OpenAIEmbedder(Embedder):
    def __init__(self, settings: EmbeddingSettings) -> None:
        super().__init__(
            query_prefix=settings.query_prefix, dimensions=settings.dimensions, sentences=settings.sentences
        )
        assert settings.base_url and settings.model_id  # checked by the settings
        self.request_size = settings.batch_size
        self.model_id = settings.model_id
        self.endpoint = JsonEndpoint(
            settings.base_url,
            "/embeddings",
            timeout_seconds=settings.timeout_seconds,
            api_key_env=settings.api_key_env,
            label="embedding endpoint",
        )

    @property
    def identity(self) -> str:
        return f"openai:{self.model_id}"

    def embed_batch(self, texts: list[str], *, purpose: str) -> Any:
        payload = {"model": self.model_id, "input": texts, "encoding_format": "float"}
        try:
            reply = self.endpoint.post(payload)
        except OutboundError as exc:
            raise EmbeddingUnavailable(exc.message, details={"stage": exc.stage}) from None
        return parse_embeddings_reply(reply, len(texts))

    def close(self) -> None:
        self.endpoint.close()
