"""The ``[semantic]`` settings section: hybrid search, the indexer, embeddings and the optional reranker.

Without a ``[semantic]`` section nothing is indexed and ``memory_search`` stays exact. With one (and
``enabled = true``, the default) every project is chunked, embedded and indexed in the background, and
``memory_search`` defaults to hybrid mode. Every field is documented in docs/configuration.md.

    [semantic]
    chunk_bytes = 1200

    [semantic.embedding]          # default: the bundled all-MiniLM-L6-v2, run locally
    provider = "local"

    [semantic.reranker]           # optional
    provider = "http"
    base_url = "http://127.0.0.1:8060/v1"
    model_id = "bge-reranker-base"
"""

from __future__ import annotations

import math
import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class _Section(BaseModel):
    # Same rule as obsmem.settings.Section (kept local so this module imports nothing from there).
    model_config = ConfigDict(extra="forbid")


def _check_base_url(value: str | None) -> str | None:
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("base_url must be an http:// or https:// URL with a host")
    if parts.username or parts.password:
        raise ValueError("base_url must not contain credentials; put the key in the environment variable")
    if parts.query or parts.fragment:
        raise ValueError("base_url must not have a query string or fragment")
    return value.rstrip("/")


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def _check_env_name(value: str) -> str:
    if not _ENV_NAME.fullmatch(value):
        raise ValueError("must be the name of an environment variable (letters, digits and '_')")
    return value


class EmbeddingSettings(_Section):
    """How chunks and queries become vectors."""

    provider: Literal["local", "openai"] = Field(
        default="local",
        description="`local`: a sentence-transformers model run in this process; `openai`: an "
        "OpenAI-compatible `/embeddings` endpoint.",
    )
    model: str = Field(
        default="",
        description="`local` only: path of a sentence-transformers model directory. Empty means the bundled "
        "all-MiniLM-L6-v2. Models are never downloaded.",
    )
    base_url: str | None = Field(
        default=None, description="`openai` only: base URL; requests go to `<base_url>/embeddings`."
    )
    model_id: str | None = Field(default=None, description="`openai` only: the `model` sent with each request.")
    query_prefix: str = Field(
        default="",
        description="Prefix for query embeddings only, joined to the query with one space (documents never "
        "get it). Some models need one, e.g. `'Represent this query for searching relevant code:'`.",
    )
    batch_size: int = Field(default=32, gt=0, le=2048, description="Texts per model call or request.")
    timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        le=600,
        description="`openai` only: overall deadline of one request (connect, send, wait and read together).",
    )
    api_key_env: str = Field(
        default="OBSMEM_EMBEDDING_API_KEY",
        description="`openai` only: environment variable holding the bearer key (unset: no key is sent).",
    )
    dimensions: int | None = Field(
        default=None,
        gt=0,
        le=16384,
        description="Expected vector size. Optional: learnt from the model; when set, any other size is an error.",
    )
    threads: int | None = Field(
        default=None,
        gt=0,
        le=256,
        description="`local` only: torch threads for indexing (default: all cores but one, which is left "
        "to queries and the service). Query embeddings always use one thread.",
    )

    _base_url = field_validator("base_url")(_check_base_url)
    _env = field_validator("api_key_env")(_check_env_name)

    @model_validator(mode="after")
    def _provider_fields(self) -> EmbeddingSettings:
        if self.provider == "openai":
            if not self.base_url or not self.model_id:
                raise ValueError("provider 'openai' needs both base_url and model_id")
            if self.model:
                raise ValueError("model is a local model path; provider 'openai' uses model_id")
        elif self.base_url or self.model_id:
            raise ValueError("base_url and model_id belong to provider 'openai'; provider 'local' uses model")
        return self


class RerankerSettings(_Section):
    """An optional second-stage scorer of the fused candidates."""

    provider: Literal["http", "local"] = Field(
        description="`http`: an endpoint with `POST <base_url>/rerank`; `local`: a sentence-transformers "
        "cross-encoder loaded from a local path."
    )
    base_url: str | None = Field(default=None, description="`http` only: base URL of the `/rerank` endpoint.")
    model_id: str | None = Field(default=None, description="`http` only: the `model` sent with each request.")
    model: str = Field(default="", description="`local` only: path of a cross-encoder model directory.")
    batch_size: int = Field(default=8, gt=0, le=1024, description="Documents per rerank request or model call.")
    document_characters: int = Field(
        default=768, gt=0, le=100_000, description="Each candidate chunk is cut to this many characters."
    )
    min_score: float | None = Field(
        default=None,
        description="Inclusive floor on the raw reranker score; chunks below it are dropped. Unset: no floor. "
        "Scores are model-specific, not probabilities: choose a floor with labelled queries.",
    )
    timeout_seconds: float = Field(
        default=10.0, gt=0, le=600, description="`http` only: overall deadline of one request."
    )
    api_key_env: str = Field(
        default="OBSMEM_RERANKER_API_KEY",
        description="`http` only: environment variable holding the bearer key (unset: no key is sent).",
    )
    max_concurrent_requests: int = Field(
        default=4, gt=0, le=64, description="`http` only: rerank batches in flight at once for one query."
    )

    _base_url = field_validator("base_url")(_check_base_url)
    _env = field_validator("api_key_env")(_check_env_name)

    @field_validator("min_score")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("min_score must be a finite number")
        return value

    @model_validator(mode="after")
    def _provider_fields(self) -> RerankerSettings:
        if self.provider == "http":
            if not self.base_url or not self.model_id:
                raise ValueError("provider 'http' needs both base_url and model_id")
        elif not self.model:
            raise ValueError("provider 'local' needs model, the path of a cross-encoder model directory")
        return self


class FusionSettings(_Section):
    """How the BM25 and vector lists become one ranking."""

    method: Literal["rrf", "convex"] = Field(
        default="rrf",
        description="`rrf`: reciprocal-rank fusion, sum of weight / (rrf_k + rank); `convex`: weighted sum of "
        "min-max normalised scores.",
    )
    rrf_k: float = Field(default=60.0, gt=0, le=10_000, description="The RRF constant k.")
    weights: dict[Literal["bm25", "vector"], float] = Field(
        default_factory=lambda: {"bm25": 1.0, "vector": 1.0},
        description="Weight of each list, e.g. `{ bm25 = 1.0, vector = 0.5 }`. A weight of 0 turns a list off.",
    )
    candidates_per_list: int = Field(default=100, gt=0, le=1000, description="Chunks taken from each list.")
    fused_candidates: int = Field(
        default=200, gt=0, le=2000, description="Chunks kept after fusion (and sent to the reranker)."
    )

    @field_validator("weights")
    @classmethod
    def _weights(cls, value: dict[str, float]) -> dict[str, float]:
        merged = {"bm25": 1.0, "vector": 1.0, **value}
        for name, weight in merged.items():
            if not math.isfinite(weight) or weight < 0:
                raise ValueError(f"weight of '{name}' must be a finite number >= 0")
        if not any(merged.values()):
            raise ValueError("at least one list needs a weight above 0")
        return merged


_TOKENIZER = re.compile(r"[a-z0-9_ ]{1,200}")


class Bm25Settings(_Section):
    """The keyword list: an FTS5 table over chunk text."""

    tokenizer: str = Field(
        default="unicode61 remove_diacritics 2",
        description="The FTS5 `tokenize` argument, e.g. `porter unicode61` for English stemming. Changing it "
        "rebuilds only the keyword table (no embedding work).",
    )
    stopwords: Literal["english", "none"] = Field(
        default="english",
        description="Query words left out of the keyword query (`english`: a short list of function words). "
        "A query made only of stopwords keeps them.",
    )
    max_postings: int = Field(
        default=20_000,
        gt=0,
        description="Bound on keyword work per query: query terms are kept rarest first while the sum of "
        "their document counts stays within this (the rarest term is always kept). FTS5 scores every "
        "match of an OR query: about 20 ms per 20,000 matches here.",
    )

    @field_validator("tokenizer")
    @classmethod
    def _known(cls, value: str) -> str:
        value = " ".join(value.split())
        if not _TOKENIZER.fullmatch(value):
            raise ValueError("tokenizer may contain only lowercase letters, digits, '_' and spaces")
        import apsw

        conn = apsw.Connection(":memory:")
        try:
            conn.execute(f"CREATE VIRTUAL TABLE probe USING fts5(x, tokenize='{value}')")
        except apsw.Error as exc:
            raise ValueError(f"FTS5 does not accept this tokenizer: {exc}") from None
        finally:
            conn.close()
        return value


class IndexSettings(_Section):
    """How the background indexer and the vector index behave."""

    background: bool = Field(
        default=True,
        description="Index in a background thread of the service (after writes and at start-up).",
    )
    batch_chunks: int = Field(
        default=256, gt=0, le=100_000, description="Chunks embedded and committed per indexing batch."
    )
    poll_seconds: float = Field(
        default=5.0, gt=0, description="How often the background indexer looks for writes made elsewhere."
    )
    exact_scan_max_chunks: int = Field(
        default=50_000,
        ge=0,
        description="A date or session filter that leaves at most this many chunks is ranked by an exact "
        "vector scan (no omissions); larger windows use the HNSW graph with the filter.",
    )
    hnsw_m: int = Field(default=16, ge=4, le=128, description="HNSW graph degree M.")
    hnsw_ef_construction: int = Field(default=200, ge=10, le=2000, description="HNSW build-time ef.")
    hnsw_ef_search: int = Field(
        default=256, ge=10, le=5000, description="HNSW query-time ef (at least the number of candidates)."
    )
    publish_min_changes: int = Field(
        default=2000,
        ge=1,
        description="Vector changes since the last index file before a new file is written (when idle).",
    )


class SemanticSettings(_Section):
    """Hybrid search. The section's presence turns it on."""

    enabled: bool = Field(default=True, description="Set false to keep the section but search exactly.")
    chunk_bytes: int = Field(default=1200, ge=4, le=1_000_000, description="Largest chunk, in UTF-8 bytes.")
    overlap_bytes: int = Field(
        default=192, ge=0, description="Bytes shared by neighbouring chunks; smaller than chunk_bytes."
    )
    max_lines: int = Field(default=80, gt=0, le=100_000, description="Most lines in one chunk.")
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    reranker: RerankerSettings | None = Field(default=None, description="Optional reranker; unset: none.")
    fusion: FusionSettings = Field(default_factory=FusionSettings)
    bm25: Bm25Settings = Field(default_factory=Bm25Settings)
    index: IndexSettings = Field(default_factory=IndexSettings)

    @model_validator(mode="after")
    def _consistent(self) -> SemanticSettings:
        if self.overlap_bytes >= self.chunk_bytes:
            raise ValueError("overlap_bytes must be smaller than chunk_bytes")
        if self.reranker is not None and not self.enabled:
            raise ValueError("a reranker needs embeddings: [semantic.reranker] is set but semantic is disabled")
        if self.index.hnsw_ef_search < self.fusion.candidates_per_list:
            raise ValueError("index.hnsw_ef_search must be at least fusion.candidates_per_list")
        return self
