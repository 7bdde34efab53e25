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

from pydantic import Field, field_validator, model_validator

from obsmem.settings.base import Section, check_base_url


def _check_base_url(value: str | None) -> str | None:
    return check_base_url(value, key_hint="put the key in the environment variable")


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def _check_env_name(value: str) -> str:
    if not _ENV_NAME.fullmatch(value):
        raise ValueError("must be the name of an environment variable (letters, digits and '_')")
    return value


class EmbeddingSettings(Section):
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
    encoder: Literal["onnx-fp32", "onnx-int8", "openvino-bf16", "torch-fp32"] = Field(
        default="onnx-fp32",
        description="`local` only: how the model runs. `onnx-fp32`: an ONNX Runtime build of the model, made "
        "once from the installed weights and cached: the vectors of `torch-fp32`, about 3x faster and "
        "without torch at search time; `onnx-int8`: the same build quantised to int8, about 1.7x faster "
        "again, with slightly different rankings (docs/eval.md); `openvino-bf16`: the ONNX build run by OpenVINO "
        "in bfloat16 (the `openvino` extra; about 2x faster than `onnx-fp32` on CPUs with avx512_bf16), vectors "
        "within a cosine of 0.99998 of fp32's, rankings that differ at near-ties (docs/eval.md); `torch-fp32`: "
        "the model as sentence-transformers runs it. Changing it rebuilds the index (the vectors differ).",
    )
    cache_dir: str = Field(
        default="",
        description="`onnx-*` and `openvino-*` encoders only: where their builds are kept. Empty means "
        "`$XDG_CACHE_HOME/obsmem/encoders` (`~/.cache/obsmem/encoders`).",
    )
    query_prefix: str = Field(
        default="",
        description="Prefix for query embeddings only, joined to the query with one space (documents never "
        "get it). Some models need one, e.g. `'Represent this query for searching relevant code:'`.",
    )
    sentences: Literal["whole", "mean"] = Field(
        default="mean",
        description="How a chunk becomes its one vector. `whole`: the chunk's text embedded as one; `mean`: a "
        "chunk of two or more sentences embedded sentence by sentence (each with its line's label, "
        "such as a speaker's `Caroline:`), its vector the normalised mean of theirs, so a sentence is not "
        'drowned by the others in the model\'s pooling (docs/eval.md, "Sentence vectors"). Changing it '
        "rebuilds the index (the vectors differ).",
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
        description="`local` only: threads for indexing (default: all cores but one while serving, which is "
        "left to queries and the service; every core in a one-shot `obsmem index`). Query embeddings "
        "always use one thread.",
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
            if self.cache_dir:
                raise ValueError("cache_dir belongs to provider 'local' (the onnx encoders)")
        elif self.base_url or self.model_id:
            raise ValueError("base_url and model_id belong to provider 'openai'; provider 'local' uses model")
        return self


class RerankerSettings(Section):
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


FUSION_METHODS = ("convex", "rrf")
# Each method's list weights when `weights` does not name a list. Convex: chosen on the calibration
# splits of LoCoMo and the bundled sample (docs/eval.md, "Fusion that holds in both domains"); RRF: the
# usual equal weights.
DEFAULT_WEIGHTS: dict[str, dict[str, float]] = {
    "convex": {"bm25": 1.25, "vector": 0.6},
    "rrf": {"bm25": 1.0, "vector": 1.0},
}


class FusionSettings(Section):
    """How the BM25 and vector lists become one ranking."""

    method: Literal["convex", "rrf"] = Field(
        default="convex",
        description="`convex`: weights['bm25'] * bm25 / the query's BM25 ceiling (what a chunk matching every "
        "query term could score) + weights['vector'] * cosine, the cosine exact for every candidate; "
        "`rrf`: reciprocal-rank fusion, sum of weight / (rrf_k + rank).",
    )
    rrf_k: float = Field(default=60.0, gt=0, le=10_000, description="The RRF constant k (`rrf` only).")
    weights: dict[Literal["bm25", "vector"], float] = Field(
        default_factory=dict,
        description="Weight of each list, e.g. `{ bm25 = 0.4, vector = 0.6 }`. A list not named gets the "
        "method's default (`convex`: bm25 1.25, vector 0.6; `rrf`: 1.0 each). A weight of 0 turns a list off.",
    )
    bm25_full_coverage: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description="`convex` only: the keyword list keeps its whole weight when its best match scores at least "
        "this share of the query's ceiling, and proportionally less below (a question in other words than its "
        "memory matches a word or two anywhere, so its keyword list is not decisive). 0 turns it off.",
    )
    neighbour_weight: float = Field(
        default=0.2,
        ge=0,
        le=10,
        description="Neighbour smoothing: each fused candidate gains this share of the best fused score among "
        "its neighbours in the same session (a neighbour that is not a candidate enters with that share "
        "alone). 0 turns it off.",
    )
    session_weight: float = Field(
        default=0.3,
        ge=0,
        le=1,  # above 1 a candidate would pass its session's best, which is to stay where it was
        description="Session evidence, before neighbour smoothing: each fused candidate moves this share of the "
        "way up to the best fused score in its session, so the session that holds the strongest match lifts "
        "its weaker ones (docs/eval.md). 0 turns it off.",
    )
    named_first: bool = Field(
        default=True,
        description="Among the first 10 fused candidates, those whose text writes more of the identifier-shaped "
        "names the question writes (`#2510`, `RetryPolicy.backoff_ms`, `--dry-run`, a short code span) go above "
        "those that write fewer, before supersession: the memory that names an identifier comes before its "
        "neighbours (docs/eval.md). false: the fused order.",
    )
    common_word_share: float = Field(
        default=0.75,
        ge=0,
        le=1,
        description="A question word that stands alone and is held by at least this share of the indexed chunks' "
        "keyword documents (a speaker's name in a conversation; never a number, a calendar word or a stopword's "
        "stem) counts half in the query vector: the vector list searches with the mean of the question's "
        "embedding and that of the question without such words, as the keyword list discounts a common word "
        "(docs/eval.md). 0 turns it off.",
    )
    candidates_per_list: int = Field(default=100, gt=0, le=1000, description="Chunks taken from each list.")
    fused_candidates: int = Field(
        default=200, gt=0, le=2000, description="Chunks kept after fusion (and sent to the reranker)."
    )

    @field_validator("weights")
    @classmethod
    def _weights(cls, value: dict[str, float]) -> dict[str, float]:
        for name, weight in value.items():
            if not math.isfinite(weight) or weight < 0:
                raise ValueError(f"weight of '{name}' must be a finite number >= 0")
        return value

    @model_validator(mode="after")
    def _method_weights(self) -> FusionSettings:
        self.weights = {**DEFAULT_WEIGHTS[self.method], **self.weights}
        if not any(self.weights.values()):
            raise ValueError("at least one list needs a weight above 0")
        return self


_TOKENIZER = re.compile(r"[a-z0-9_ ]{1,200}")


KEYWORD_COLUMNS = ("body", "previous", "next", "date")
# A memory's own words outweigh its neighbours': with `previous` as heavy as `body`, the memory right after a
# match scores about as high as the match itself (docs/eval.md, "Why the recipe works").
DEFAULT_COLUMN_WEIGHTS: dict[str, float] = {"body": 1.0, "previous": 0.5, "next": 0.2, "date": 2.0}


class Bm25Settings(Section):
    """The keyword list: an FTS5 table of contextual keyword documents (docs/semantic.md)."""

    tokenizer: str = Field(
        default="porter unicode61 remove_diacritics 2",
        description="The FTS5 `tokenize` argument (default: English stemming over unicode61). Changing it "
        "rebuilds only the keyword table (no embedding work).",
    )
    stopwords: Literal["english", "none"] = Field(
        default="english",
        description="Query words left out of the keyword query (`english`: a short list of function words). "
        "A query made only of stopwords keeps them.",
    )
    max_postings: int = Field(
        default=5_000,
        gt=0,
        description="Bound on keyword work per query: query terms are kept rarest first while the sum of "
        "their document counts stays within this (the rarest term is always kept; counts stop at this + 1). "
        "When even the rarest term is in more chunks, an open search scores only the this-many most "
        "recently indexed of them (a date or session filter scores its whole window). FTS5 scores every match of an OR "
        "query: about 3 ms per 5,000 matches, 13 ms per 20,000 (100k chunks). 5,000 never binds on a "
        "LoCoMo conversation (at most 680 turns).",
    )
    column_weights: dict[Literal["body", "previous", "next", "date"], float] = Field(
        default_factory=lambda: dict(DEFAULT_COLUMN_WEIGHTS),
        description="BM25 weight of each column of a keyword document: `body` (the chunk), `previous` / "
        "`next` (the end of the memory before it and the start of the one after it in its session), "
        "`date` (its date as words, `8 May 2023`). Unnamed columns keep their defaults (1.0, 0.5, 0.2, "
        "2.0). Applied at query time: changing them rebuilds nothing.",
    )
    context_characters: int = Field(
        default=300,
        ge=0,
        le=10_000,
        description="Characters of each neighbouring memory kept in `previous` / `next` (cut at a word "
        "boundary); 0 leaves them empty. Changing it rebuilds only the keyword table.",
    )

    @field_validator("column_weights")
    @classmethod
    def _column_weights(cls, value: dict[str, float]) -> dict[str, float]:
        merged = {**DEFAULT_COLUMN_WEIGHTS, **value}
        for name, weight in merged.items():
            if not math.isfinite(weight) or weight < 0:
                raise ValueError(f"weight of column '{name}' must be a finite number >= 0")
        if merged["body"] <= 0:
            raise ValueError("the weight of column 'body' must be above 0")
        return {name: merged[name] for name in KEYWORD_COLUMNS}

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


class SupersessionSettings(Section):
    """For a question about the present, the latest memory about a thing ranks above the ones it replaced."""

    enabled: bool = Field(
        default=False,
        description="Among the first `depth` fused candidates of a question about the present (now, today, "
        "current, latest, still, ...; no named month or year), a candidate from a later session whose embedding "
        'is close to an earlier, higher-ranked one\'s moves just above it (docs/semantic.md, "Supersession"). '
        "Off by default: it costs a few LoCoMo questions (docs/eval.md).",
    )
    depth: int = Field(default=10, ge=2, le=200, description="How many of the first fused candidates it reorders.")
    min_cosine: float = Field(
        default=0.5,
        ge=-1,
        le=1,
        description="How close two candidates' embeddings must be for the later one to replace the earlier.",
    )
    stated_min_cosine: float = Field(
        default=0.4,
        ge=-1,
        le=1,
        description="The same, when the later memory says it changes something (supersedes, instead of, no "
        "longer, switched, ...).",
    )
    max_score_gap: float | None = Field(
        default=None,
        ge=0,
        description="A later candidate replaces an earlier one only if its fused score is at most this much lower "
        "(it must answer the question nearly as well). Unset: no limit.",
    )
    present_only: bool = Field(
        default=True,
        description="Apply only to questions with a present-state word; false applies it to every question.",
    )
    named_replacements: bool = Field(
        default=True,
        description="With `enabled`, also for a question not about the present, as long as it is not anchored in "
        "the past (no past-tense or history word, no named month or year): a later candidate among the first "
        '`depth`, from another session, that says it replaced a value an earlier, higher-ranked one states ("from '
        '14 to 16", "supersedes CBOR") and is close to it (cosine at least `stated_min_cosine`) moves just '
        "above it.",
    )
    settled_first: bool = Field(
        default=True,
        description="Then, among the same first candidates, a note that states where a thing was left (a "
        "decision, a completion, a change) moves above the higher-ranked notes of its own session about the same "
        "thing (cosine at least `stated_min_cosine`) that do not: the request and the details around it.",
    )


class IndexSettings(Section):
    """How the background indexer and the vector index behave."""

    background: bool = Field(
        default=True,
        description="Index in a background thread of the service (after writes and at start-up).",
    )
    batch_chunks: int = Field(
        default=256, gt=0, le=100_000, description="Chunks embedded and committed per indexing batch."
    )
    events: bool = Field(
        default=False,
        description="Also index the conversation events (content, tool name and arguments), for hybrid "
        "search with scope `conversation` or `all`. Appends write no marker: the indexer marks events from a "
        "durable watermark of its own, so turning this on later indexes the events already stored. Off: hybrid "
        "search of the conversation is `mode_unavailable` (exact conversation search needs no index).",
    )
    poll_seconds: float = Field(
        default=5.0, gt=0, description="How often the background indexer looks for writes made elsewhere."
    )
    exact_scan_max_chunks: int | None = Field(
        default=None,
        ge=0,
        description="Unset (the default): every date- or session-filtered search ranks the window's vectors "
        "by an exact scan, so nothing inside the window can be missed. A number: windows larger than it use "
        "the HNSW graph with the filter instead (faster for huge windows, but it may omit matches).",
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


class SemanticSettings(Section):
    """Hybrid search. The section's presence turns it on."""

    enabled: bool = Field(default=True, description="Set false to keep the section but search exactly.")
    chunk_bytes: int = Field(default=1200, ge=4, le=1_000_000, description="Largest chunk, in UTF-8 bytes.")
    overlap_bytes: int = Field(
        default=192, ge=0, description="Bytes shared by neighbouring chunks; smaller than chunk_bytes."
    )
    max_lines: int = Field(default=80, gt=0, le=100_000, description="Most lines in one chunk.")
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    reranker: RerankerSettings | None = Field(default=None, description="Optional reranker; unset: none.")
    min_relevance: float | None = Field(
        default=None,
        description="Floor on the fused evidence of a hybrid search without a rerank: when even the best "
        "candidate's fused score (before neighbour smoothing) is below it, the search returns no hits and says "
        "that nothing was close enough. Unset: no floor (the nearest memories always come back). Needs "
        "`convex` fusion; choose it with `obsmem eval calibrate` (without a reranker). With a reranker, "
        "`[semantic.reranker] min_score` is the floor instead.",
    )
    relevance_measure: Literal["evidence", "evidence+standout", "evidence+names", "evidence+standout+names"] = Field(
        default="evidence",
        description="What `min_relevance` floors: `evidence`, the best fused score before smoothing; "
        "`+standout` adds how far the best cosine stands above the mean cosine of the vector list's "
        "candidates (separates near misses better); `+names` makes it 0 when the question names something "
        "(an identifier, or a capitalised word the embedding model does not know whole) that no indexed "
        "chunk holds (docs/eval.md). Calibrate the floor for the measure you use.",
    )
    fusion: FusionSettings = Field(default_factory=FusionSettings)
    supersession: SupersessionSettings = Field(default_factory=SupersessionSettings)
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
        if self.min_relevance is not None:
            if not math.isfinite(self.min_relevance):
                raise ValueError("min_relevance must be a finite number")
            if self.fusion.method != "convex":
                raise ValueError("min_relevance needs fusion method 'convex' (reciprocal-rank scores have no scale)")
        return self
