"""Local embeddings with ONNX Runtime: the fp32 (default) or int8 build of the local model (:mod:`encoder_build`).

Neither torch nor sentence-transformers is imported here: text is tokenized with the ``tokenizers``
package from the tokenizer saved beside the model, so a one-shot search loads in a fraction of a second
and prints nothing. The model is built once, on first use (or by ``obsmem encoder build``).

Threads. ONNX Runtime gives every session its own thread pool, so queries and indexing each get a
session and never share a process-wide thread count (as torch's is). A query runs on one thread (the
service keeps a core for queries); indexing uses all cores but one while the process serves, and every
core in a one-shot ``obsmem index`` (:meth:`OnnxEmbedder.every_core`), unless
``semantic.embedding.threads`` says otherwise.

Batches. Texts are sorted by length and cut into batches of ``batch_size`` so each batch pads only to
its longest text (as sentence-transformers does); the vectors go back in the caller's order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from obsmem.errors import EmbeddingUnavailable
from obsmem.indexer.embed_local import OnThisMachine
from obsmem.indexer.encoder_build import RECIPES, BuiltEncoder, default_cache_dir, ensure_encoder
from obsmem.settings import EmbeddingSettings


class OnnxEmbedder(OnThisMachine):
    request_size = 1024  # batched inside (sorted by length, ``batch_size`` texts per model run)

    def __init__(self, settings: EmbeddingSettings) -> None:
        super().__init__(settings)
        self.encoder = settings.encoder
        self._identity = f"onnx:{RECIPES[settings.encoder]}:{self.model_name}"
        self.cache_dir = Path(settings.cache_dir).expanduser() if settings.cache_dir else default_cache_dir()
        self._built: BuiltEncoder | None = None
        self._sessions: dict[int, Any] = {}  # thread count -> onnxruntime.InferenceSession
        self._tokenizers: dict[str, Any] = {}

    @property
    def identity(self) -> str:
        """The build recipe and the model: a different recipe or model never shares an index."""
        return self._identity

    def built(self) -> BuiltEncoder:
        """The verified model files, built first if needed."""
        with self._load_lock:
            if self._built is None:
                self._built = ensure_encoder(self.path, self.cache_dir, self.encoder)
            return self._built

    def _session(self, threads: int) -> Any:
        built = self.built()
        with self._load_lock:
            session = self._sessions.get(threads)
            if session is None:
                import onnxruntime

                options = onnxruntime.SessionOptions()
                options.intra_op_num_threads = threads
                options.inter_op_num_threads = 1
                options.log_severity_level = 3  # warnings about the graph are for the build, not the user
                try:
                    session = onnxruntime.InferenceSession(
                        str(built.model_file), options, providers=["CPUExecutionProvider"]
                    )
                except Exception as exc:
                    raise EmbeddingUnavailable(f"cannot load the fast local encoder ({type(exc).__name__})") from None
                self._sessions[threads] = session
            return session

    def _tokenizer(self, purpose: str) -> Any:
        """One tokenizer per purpose: a tokenizer is not to be used by two threads at once."""
        built = self.built()
        with self._load_lock:
            tokenizer = self._tokenizers.get(purpose)
            if tokenizer is None:
                from tokenizers import Tokenizer

                tokenizer = Tokenizer.from_file(str(built.tokenizer_file))
                tokenizer.enable_truncation(built.max_seq_length)
                tokenizer.enable_padding(pad_id=tokenizer.token_to_id("[PAD]") or 0)
                self._tokenizers[purpose] = tokenizer
            return tokenizer

    def embed_batch(self, texts: list[str], *, purpose: str) -> Any:
        threads = 1 if purpose == "query" else self.document_threads
        session = self._session(threads)
        tokenizer = self._tokenizer(purpose)
        with self._locks[purpose]:
            return self._encode(session, tokenizer, texts)

    def _encode(self, session: Any, tokenizer: Any, texts: list[str]) -> np.ndarray:
        vectors: np.ndarray | None = None
        order = np.argsort([len(text) for text in texts], kind="stable")
        try:
            for start in range(0, len(texts), self.batch_size):
                rows = order[start : start + self.batch_size]
                encodings = tokenizer.encode_batch([texts[i] for i in rows])
                ids = np.array([e.ids for e in encodings], dtype=np.int64)
                mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
                pooled = session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
                if vectors is None:
                    vectors = np.zeros((len(texts), pooled.shape[1]), dtype=np.float32)
                vectors[rows] = pooled
        except Exception as exc:
            raise EmbeddingUnavailable(f"the fast local encoder failed ({type(exc).__name__})") from None
        return vectors if vectors is not None else np.zeros((0, self._dimensions or 0), dtype=np.float32)

    def close(self) -> None:
        with self._load_lock:
            self._sessions.clear()
            self._tokenizers.clear()


def local_encoder(settings: EmbeddingSettings) -> BuiltEncoder:
    """Build (or verify) the fast encoder of the configured local model now (``obsmem encoder build``)."""
    return OnnxEmbedder(settings).built()
