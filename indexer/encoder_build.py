"""The fast local encoders: the sentence-transformers model exported to ONNX (and for int8, quantised), built once.

Nothing is downloaded: the build reads the installed model directory (the bundled all-MiniLM-L6-v2 by
default) and exports its transformer with mean pooling to ONNX (``torch.onnx``).

- ``onnx-fp32`` (the default encoder) is that export: the vectors of sentence-transformers (cosine to
  them 0.99999 or more), run by ONNX Runtime without torch.
- ``onnx-int8`` also quantises the weights of every matrix product to int8 per output channel (ONNX
  Runtime's dynamic quantisation: activations are quantised on the fly). Per channel rather than per
  tensor, because one scale per matrix lost too much: measured on LoCoMo turns, cosine to fp32 fell to
  0.95 on average (0.88 at worst); per channel it is 0.992. Before quantising, the activations'
  outlier channels are smoothed into the weights (:mod:`encoder_smoothing`, ranges measured on the
  bundled sample's texts): 0.997. The weights keep 7 bits of the 8 (``reduce_range``): on a CPU without
  AVX-512 VNNI, ONNX Runtime multiplies uint8 activations by int8 weights with an instruction whose pairwise
  sums saturate at 16 bits, and with full-range weights the vectors fell to a cosine of 0.993 on the
  bundled sample (0.9955 with the reduced range, on the same AMD EPYC with AVX2 alone).

The result is cached, keyed by the hash of the model directory's files and by the recipe, under
``semantic.embedding.cache_dir``::

    <cache_dir>/<weights hash>-<recipe>/model.onnx, tokenizer.json, manifest.json

- A build writes into a fresh temporary directory, fsyncs it and renames it into place, so a reader sees
  a whole entry or none; a file lock keeps two processes from building the same entry at once.
- The manifest records the model file's size and SHA-256, checked before every load (the hash again
  only when the file changed since its last check): a damaged entry is moved aside and built again,
  never loaded.
- Hashing the weights (about 90 MB) on every start would cost a one-shot search a few hundred ms, so the
  hash of a model directory is remembered beside the cache, keyed by its files' sizes and modification
  times; any change to a file hashes it again.

Building imports torch and transformers (about 10-30 s, once); loading a built entry needs neither.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from obsmem.errors import ConfigurationError, EmbeddingUnavailable

log = logging.getLogger("obsmem.indexer")

#: Each encoder's build recipe (the export, and the quantisation for int8); part of the cache key and of the
#: index signature, so a change to how the model is built never mixes its vectors with older ones.
RECIPES = {"onnx-int8": "onnx-int8-sq2", "onnx-fp32": "onnx-fp32-1"}
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
MANIFEST_FILE = "manifest.json"
VERIFIED_FILE = ".verified.json"
_HASH_CHUNK = 1 << 20


@dataclass(frozen=True)
class BuiltEncoder:
    """A verified cache entry: where it is, what it was built from, and whether this call built it."""

    directory: Path
    weights_sha256: str
    max_seq_length: int
    built: bool
    build_seconds: float

    @property
    def model_file(self) -> Path:
        return self.directory / MODEL_FILE

    @property
    def tokenizer_file(self) -> Path:
        return self.directory / TOKENIZER_FILE


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/obsmem/encoders`` (``~/.cache/obsmem/encoders`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "obsmem" / "encoders"


def ensure_encoder(model_dir: Path, cache_dir: Path, encoder: str = "onnx-fp32") -> BuiltEncoder:
    """The verified cache entry of ``encoder`` (a key of :data:`RECIPES`) for ``model_dir``, built now if it
    is missing or damaged."""
    recipe = RECIPES[encoder]
    cache_dir.mkdir(parents=True, exist_ok=True)
    weights = weights_hash(model_dir, cache_dir)
    entry = cache_dir / f"{weights[:24]}-{recipe}"
    found = _verified(entry, weights, recipe)
    if found is not None:
        return found
    with _build_lock(cache_dir):
        found = _verified(entry, weights, recipe)  # another process may have built it while we waited
        if found is not None:
            return found
        if entry.exists():
            log.warning("the cached fast encoder at %s is damaged; building it again", entry)
            _discard(entry)
        started = time.monotonic()
        log.warning("building the fast local encoder once (%s; about 30 s) into %s", encoder, entry)
        _build(model_dir, entry, weights, recipe)
        seconds = time.monotonic() - started
        found = _verified(entry, weights, recipe)
        if found is None:  # pragma: no cover - a build that does not verify is a bug, not user input
            raise EmbeddingUnavailable("the fast local encoder was built but does not verify")
        return BuiltEncoder(found.directory, weights, found.max_seq_length, True, round(seconds, 2))


# -- the weights' hash ---------------------------------------------------------------------------------------


def _model_files(model_dir: Path) -> list[Path]:
    return sorted(p for p in model_dir.rglob("*") if p.is_file() and ".git" not in p.parts)


def weights_hash(model_dir: Path, cache_dir: Path) -> str:
    """SHA-256 over the model directory's files (names and bytes), remembered while no file changes."""
    files = _model_files(model_dir)
    if not files:
        raise ConfigurationError(f"semantic.embedding.model: no model files in {model_dir}")
    stamp = [[f.relative_to(model_dir).as_posix(), f.stat().st_size, f.stat().st_mtime_ns] for f in files]
    memo_dir = cache_dir / ".hashes"
    memo = memo_dir / f"{hashlib.sha256(str(model_dir.resolve()).encode()).hexdigest()[:24]}.json"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        saved = json.loads(memo.read_text())
        if saved["stamp"] == stamp:
            return str(saved["sha256"])
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(model_dir).as_posix().encode() + b"\0")
        with path.open("rb") as handle:
            while block := handle.read(_HASH_CHUNK):
                digest.update(block)
    value = digest.hexdigest()
    memo_dir.mkdir(parents=True, exist_ok=True)
    _write_atomic(memo, json.dumps({"stamp": stamp, "sha256": value}).encode())
    return value


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(_HASH_CHUNK):
            digest.update(block)
    return digest.hexdigest()


# -- verify, lock, publish -----------------------------------------------------------------------------------


def _verified(entry: Path, weights: str, recipe: str) -> BuiltEncoder | None:
    """The entry if its manifest matches and its files are whole; None if missing or damaged."""
    try:
        manifest = json.loads((entry / MANIFEST_FILE).read_text())
        model = entry / MODEL_FILE
        if manifest.get("weights_sha256") != weights or manifest.get("recipe") != recipe:
            return None
        if model.stat().st_size != manifest["model_bytes"] or not _checksum_holds(model, manifest["model_sha256"]):
            return None
        tokenizer = entry / TOKENIZER_FILE
        if tokenizer.stat().st_size != manifest["tokenizer_bytes"]:
            return None
        return BuiltEncoder(entry, weights, int(manifest["max_seq_length"]), False, 0.0)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _checksum_holds(model: Path, expected: str) -> bool:
    """The model's SHA-256 is ``expected``. Hashing the fp32 model (90 MB) costs a one-shot search 0.1-0.2 s,
    so a match is remembered beside it with the file's inode, size and modification time; a file written
    since (or replaced) is hashed again."""
    stat = model.stat()
    stamp = [stat.st_ino, stat.st_size, stat.st_mtime_ns, expected]
    memo = model.with_name(VERIFIED_FILE)
    with contextlib.suppress(OSError, ValueError):
        if json.loads(memo.read_text()) == stamp:
            return True
    if file_sha256(model) != expected:
        return False
    with contextlib.suppress(OSError):  # a read-only cache is verified again next time, no harm done
        _write_atomic(memo, json.dumps(stamp).encode())
    return True


@contextlib.contextmanager
def _build_lock(cache_dir: Path) -> Iterator[None]:
    with (cache_dir / ".build.lock").open("a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _discard(entry: Path) -> None:
    aside = entry.with_name(f".damaged-{entry.name}-{os.getpid()}-{time.monotonic_ns()}")
    os.replace(entry, aside)
    shutil.rmtree(aside, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: bytes) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _build(model_dir: Path, entry: Path, weights: str, recipe: str) -> None:
    """Export, quantise and publish ``entry`` (write-new, fsync, rename)."""
    work = Path(tempfile.mkdtemp(dir=entry.parent, prefix=f".building-{entry.name}-"))
    try:
        max_seq_length = _export(model_dir, work, quantise=recipe.startswith("onnx-int8"))
        model = work / MODEL_FILE
        tokenizer = work / TOKENIZER_FILE
        manifest = {
            "recipe": recipe,
            "weights_sha256": weights,
            "model_bytes": model.stat().st_size,
            "model_sha256": file_sha256(model),
            "tokenizer_bytes": tokenizer.stat().st_size,
            "max_seq_length": max_seq_length,
        }
        (work / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True))
        for path in work.iterdir():
            with path.open("rb") as handle:
                os.fsync(handle.fileno())
        _fsync_dir(work)
        os.replace(work, entry)
        _fsync_dir(entry.parent)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


# -- the export itself (torch, transformers and onnxruntime's quantiser: imported only here) ----------------


def _sentence_config(model_dir: Path) -> int:
    """The model's max_seq_length; refuses a model that does not pool by the mean of its tokens."""
    pooling = model_dir / "1_Pooling" / "config.json"
    if pooling.is_file():
        config = json.loads(pooling.read_text())
        if not config.get("pooling_mode_mean_tokens", False) or any(
            config.get(key) for key in ("pooling_mode_cls_token", "pooling_mode_max_tokens")
        ):
            raise ConfigurationError(
                "the onnx encoders support models that mean-pool their tokens; use encoder 'torch-fp32' for this model"
            )
    sentence = model_dir / "sentence_bert_config.json"
    if sentence.is_file():
        return int(json.loads(sentence.read_text()).get("max_seq_length", 256))
    return 256


def _export(model_dir: Path, work: Path, *, quantise: bool) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    max_seq_length = _sentence_config(model_dir)
    try:
        import torch
        import transformers
        from onnxruntime.quantization import QuantType, quantize_dynamic
        from transformers import AutoModel, AutoTokenizer
    except ImportError as exc:
        raise EmbeddingUnavailable(f"building the fast encoder needs torch and transformers ({exc.name})") from None

    transformers.logging.disable_progress_bar()
    transformers.logging.set_verbosity_error()
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True, use_fast=True)
        model = AutoModel.from_pretrained(str(model_dir), local_files_only=True, attn_implementation="eager").eval()
    except Exception as exc:
        raise EmbeddingUnavailable(
            f"cannot load the local embedding model to build it ({type(exc).__name__})"
        ) from None
    max_seq_length = min(max_seq_length, int(getattr(model.config, "max_position_embeddings", max_seq_length)))
    tokenizer.backend_tokenizer.save(str(work / TOKENIZER_FILE))

    class MeanPooled(torch.nn.Module):
        """The transformer and sentence-transformers' mean pooling, as one graph (normalising stays in Python)."""

        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden = self.inner(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=torch.zeros_like(input_ids)
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)

    # Trace with padding in the batch, so the mask handling that padded batches need is in the graph.
    ids = torch.ones((2, 16), dtype=torch.long)
    mask = torch.ones((2, 16), dtype=torch.long)
    mask[1, 9:] = 0
    fp32 = work / ("fp32.onnx" if quantise else MODEL_FILE)
    with torch.no_grad(), _quiet_warnings():
        torch.onnx.export(
            MeanPooled(model),
            (ids, mask),
            str(fp32),
            input_names=["input_ids", "attention_mask"],
            output_names=["embedding"],
            dynamic_axes={"input_ids": {0: "batch", 1: "tokens"}, "attention_mask": {0: "batch", 1: "tokens"}},
            opset_version=17,
            dynamo=False,
        )
    if quantise:
        from obsmem.indexer.encoder_smoothing import calibration_texts, smooth

        smoothed = work / "smoothed.onnx"
        with _quiet_warnings():
            smooth(fp32, work / TOKENIZER_FILE, smoothed, calibration_texts(), max_length=max_seq_length)
            quantize_dynamic(
                str(smoothed), str(work / MODEL_FILE), per_channel=True, reduce_range=True, weight_type=QuantType.QInt8
            )
        fp32.unlink()
        smoothed.unlink()
    return max_seq_length


@contextlib.contextmanager
def _quiet_warnings() -> Iterator[None]:
    """The exporter's tracer warnings and the quantiser's advice are about the build, not for the user."""
    import warnings

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        root.setLevel(level)
