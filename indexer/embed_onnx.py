"""Local embeddings with ONNX Runtime: the fp32 (default) or int8 build of the local model (:mod:`encoder_build`).

Neither torch nor sentence-transformers is imported here: text is tokenized with the ``tokenizers``
package from the tokenizer saved beside the model, so a one-shot search loads in a fraction of a second
and prints nothing. The model is built once, on first use (or by ``obsmem encoder build``).

Threads. Every model run is single-threaded, and indexing runs ``document_threads`` of them side by side
on different batches (data parallel) instead of one run spread over several threads (intra-op parallel):
the threads of one parallel run meet at a barrier after every operator, so a core taken away for a moment
(by the indexing thread's writes, or another process) stalls them all. Measured on 2 cores under load
(LoCoMo turns, int8): 2 single-threaded runs side by side 37-40 texts/s, one run on 2 threads 22-24,
and 26-31 against 16-19 with a busy Python thread beside them. A query runs on one thread (the service
keeps a core for queries); indexing uses all cores but one while the process serves, and every core in a
one-shot ``obsmem index`` (:meth:`OnnxEmbedder.every_core`), unless ``semantic.embedding.threads`` says
otherwise. Queries and indexing share one session (ONNX Runtime runs calls side by side; one copy of
the weights in memory), each behind its own lock, so neither waits for the other's run.

Batches. Texts are sorted by length and cut into batches of ``batch_size`` so each batch pads only to
its longest text (as sentence-transformers does); the vectors go back in the caller's order. Workers take
the batches in length order, so the batches that run side by side are of about the same length.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from obsmem.errors import EmbeddingUnavailable
from obsmem.indexer.embed_local import OnBuiltExport, encode_by_length
from obsmem.indexer.encoder_build import RECIPES, BuiltEncoder
from obsmem.settings import EmbeddingSettings


class OnnxEmbedder(OnBuiltExport):
    request_size = 1024  # batched inside (sorted by length, ``batch_size`` texts per model run)

    def __init__(self, settings: EmbeddingSettings) -> None:
        super().__init__(settings, export=settings.encoder)
        self._identity = f"onnx:{RECIPES[settings.encoder]}:{self.model_name}"
        self._loaded_session: Any = None  # onnxruntime.InferenceSession; every run single-threaded

    @property
    def identity(self) -> str:
        """The build recipe and the model: a different recipe or model never shares an index."""
        return self._identity

    def _session(self) -> Any:
        built = self.built()
        with self._load_lock:
            session = self._loaded_session
            if session is None:
                import onnxruntime

                options = onnxruntime.SessionOptions()
                options.intra_op_num_threads = 1  # parallel by batches instead (see the module's docstring)
                options.inter_op_num_threads = 1
                options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
                options.log_severity_level = 3  # warnings about the graph are for the build, not the user
                try:
                    session = onnxruntime.InferenceSession(
                        str(built.model_file), options, providers=["CPUExecutionProvider"]
                    )
                except Exception as exc:
                    raise EmbeddingUnavailable(f"cannot load the fast local encoder ({type(exc).__name__})") from None
                self._loaded_session = session
            return session

    def embed_batch(self, texts: list[str], *, purpose: str) -> Any:
        workers = 1 if purpose == "query" else self.document_threads
        session = self._session()
        with self._locks[purpose]:
            return self._encode(session, purpose, texts, workers)

    def _encode(self, session: Any, purpose: str, texts: list[str], workers: int) -> np.ndarray:
        def run(batch: list[str]) -> np.ndarray:
            with self._tokenizers.borrow(purpose) as tokenizer:
                encodings = tokenizer.encode_batch(batch)
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            return session.run(None, {"input_ids": ids, "attention_mask": mask})[0]

        try:
            return encode_by_length(
                texts, run, batch_size=self.batch_size, workers=workers, dimensions=self._dimensions
            )
        except Exception as exc:
            raise EmbeddingUnavailable(f"the fast local encoder failed ({type(exc).__name__})") from None

    def close(self) -> None:
        with self._load_lock:
            self._loaded_session = None
            self._tokenizers.clear()


def local_encoder(settings: EmbeddingSettings) -> BuiltEncoder:
    """Build (or verify) the fast encoder of the configured local model now (``obsmem encoder build``); for
    ``openvino-bf16``, the ONNX export it compiles."""
    if settings.encoder == "openvino-bf16":
        from obsmem.indexer.embed_openvino import OpenVinoEmbedder

        return OpenVinoEmbedder(settings).built()
    return OnnxEmbedder(settings).built()
