"""Local embeddings with OpenVINO in bf16 (``encoder = "openvino-bf16"``): the ONNX export of ``onnx-fp32``
(:mod:`encoder_build`, the same cache entry), compiled by OpenVINO's CPU plugin with bfloat16 as the
inference precision.

Why bf16. bfloat16 keeps fp32's 8-bit exponent and cuts the mantissa to 7 bits, so, unlike int8, no
activation outlier can fall out of range: the vectors stay within a cosine of 0.99998 of fp32's on
LoCoMo turns and questions (int8: 0.997), and rankings with them. On a CPU with ``avx512_bf16`` one
instruction does twice the multiply-adds of an fp32 one and the packed weights are half the bytes, so
the matrix products (80 % of a query's time) cost about half. On a CPU without it OpenVINO computes in
fp32 (the same vectors within that cosine, none of the speed).

Shapes. OpenVINO's kernels are fastest for a shape fixed at compile time; a dynamic shape costs about
1 ms of planning per call on a 16-token question. So a query runs on a model compiled for its length
rounded up to a multiple of :data:`QUERY_BUCKET` tokens (padding is masked out in attention and left out
of the mean pooling, so it changes nothing but the work), compiled on first use of that length; a longer
query than :data:`STATIC_QUERY_TOKENS` uses the dynamic model, as documents do.

Threads. As with the ONNX encoders, every model run is single-threaded: documents run on a model
compiled with one stream per indexing thread (OpenVINO's CPU streams: a single-threaded executor each),
one infer request per batch in flight, and a query on its own one-stream model, so neither waits for the
other. CPU pinning is off: on a shared machine a pinned thread cannot move to a free core.

Nothing is downloaded and nothing but the build's files is read; ``import openvino`` happens on first use, so
an install without the package can run every other encoder.
"""

from __future__ import annotations

import contextlib
import os
import queue
from collections.abc import Iterator
from typing import Any

import numpy as np

from obsmem.errors import EmbeddingUnavailable
from obsmem.indexer.embed_local import OnBuiltExport, encode_by_length
from obsmem.indexer.encoder_build import RECIPES
from obsmem.settings import EmbeddingSettings

#: The ONNX export this encoder compiles (the ``onnx-fp32`` cache entry: one copy of the files for both).
EXPORT = "onnx-fp32"
#: How OpenVINO runs it; with the export's recipe, part of the index signature.
RUNTIME_RECIPE = "openvino-bf16-1"
QUERY_BUCKET = 16  # query lengths round up to a multiple of this (LoCoMo questions: p50 12, p95 16 tokens)
STATIC_QUERY_TOKENS = 64  # longer queries use the dynamic model rather than compile one more shape

_INPUTS = ("input_ids", "attention_mask")


def _compile_options(threads: int, streams: int) -> dict[str, Any]:
    return {
        "INFERENCE_PRECISION_HINT": "bf16",
        "INFERENCE_NUM_THREADS": threads,
        "NUM_STREAMS": streams,
        "ENABLE_CPU_PINNING": False,
    }


class OpenVinoEmbedder(OnBuiltExport):
    request_size = 1024  # batched inside (sorted by length, ``batch_size`` texts per model run)
    pads_batches = False  # padded here, to the batch's longest text or the query's bucket

    def __init__(self, settings: EmbeddingSettings) -> None:
        super().__init__(settings, export=EXPORT)
        self._identity = f"openvino:{RUNTIME_RECIPE}:{RECIPES[EXPORT]}:{self.model_name}"
        self._core: Any = None  # openvino.Core
        self._source: Any = None  # the read (uncompiled) model
        self._documents: Any = None  # compiled with dynamic shapes, one stream per core
        self._queries: dict[int, Any] = {}  # padded length (0: dynamic) -> infer request
        self._idle_requests: queue.SimpleQueue[Any] = queue.SimpleQueue()  # document infer requests

    @property
    def identity(self) -> str:
        """The runtime and its precision, the export's recipe and the model: another never shares an index."""
        return self._identity

    def _read(self) -> Any:
        """OpenVINO's core and the read model (under ``_load_lock``)."""
        if self._source is None:
            try:
                import openvino
            except ImportError:
                raise EmbeddingUnavailable(
                    "encoder 'openvino-bf16' needs the openvino package (pip install openvino)"
                ) from None
            try:
                self._core = openvino.Core()
                self._source = self._core.read_model(str(self._built_unlocked().model_file))
            except Exception as exc:
                raise EmbeddingUnavailable(f"cannot load the OpenVINO encoder ({type(exc).__name__})") from None
        return self._source

    def _compile(self, model: Any, threads: int, streams: int) -> Any:
        try:
            return self._core.compile_model(model, "CPU", _compile_options(threads, streams))
        except Exception as exc:
            raise EmbeddingUnavailable(f"cannot compile the OpenVINO encoder ({type(exc).__name__})") from None

    def _query_request(self, tokens: int) -> Any:
        """The infer request for a query of ``tokens`` tokens, and the length to pad it to (0: as it is)."""
        padded = -(-tokens // QUERY_BUCKET) * QUERY_BUCKET if tokens <= STATIC_QUERY_TOKENS else 0
        with self._load_lock:
            request = self._queries.get(padded)
            if request is None:
                model = self._read()
                if padded:
                    model = model.clone()
                    model.reshape({name: [1, padded] for name in _INPUTS})
                request = self._compile(model, 1, 1).create_infer_request()
                self._queries[padded] = request
            return request, padded

    def _document_model(self) -> Any:
        with self._load_lock:
            if self._documents is None:
                cores = os.cpu_count() or 1
                self._documents = self._compile(self._read(), cores, cores)  # one single-threaded stream per core
            return self._documents

    @contextlib.contextmanager
    def _document_request(self) -> Iterator[Any]:
        compiled = self._document_model()
        try:
            request = self._idle_requests.get_nowait()
        except queue.Empty:
            request = compiled.create_infer_request()
        try:
            yield request
        finally:
            self._idle_requests.put(request)

    def embed_batch(self, texts: list[str], *, purpose: str) -> Any:
        try:
            with self._locks[purpose]:
                if purpose == "query":
                    return np.concatenate([self._embed_query_text(text) for text in texts])
                return self._encode_documents(texts, self.document_threads)
        except EmbeddingUnavailable:
            raise
        except Exception as exc:
            raise EmbeddingUnavailable(f"the OpenVINO encoder failed ({type(exc).__name__})") from None

    def _embed_query_text(self, text: str) -> np.ndarray:
        with self._tokenizers.borrow("query") as tokenizer:
            ids = tokenizer.encode(text).ids
        request, padded = self._query_request(len(ids))
        feeds = _padded([ids], padded or len(ids))
        return np.array(request.infer(feeds)[0], dtype=np.float32, copy=True)

    def _encode_documents(self, texts: list[str], workers: int) -> np.ndarray:
        def run(batch: list[str]) -> np.ndarray:
            with self._tokenizers.borrow("documents") as tokenizer:
                encodings = tokenizer.encode_batch(batch)
            ids = [encoding.ids for encoding in encodings]
            feeds = _padded(ids, max(len(row) for row in ids))
            with self._document_request() as request:
                return np.array(request.infer(feeds)[0], dtype=np.float32, copy=True)

        return encode_by_length(texts, run, batch_size=self.batch_size, workers=workers, dimensions=self._dimensions)

    def close(self) -> None:
        with self._load_lock:
            self._queries.clear()
            self._documents = None
            self._idle_requests = queue.SimpleQueue()
            self._source = None
            self._core = None
            self._tokenizers.clear()


def _padded(ids: list[list[int]], length: int) -> dict[str, np.ndarray]:
    """Token ids and attention mask, padded on the right to ``length`` (an id under a zero mask is never seen)."""
    input_ids = np.zeros((len(ids), max(length, 1)), dtype=np.int64)
    mask = np.zeros_like(input_ids)
    for row, values in enumerate(ids):
        input_ids[row, : len(values)] = values
        mask[row, : len(values)] = 1
    return {"input_ids": input_ids, "attention_mask": mask}
