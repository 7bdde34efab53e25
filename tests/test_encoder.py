"""The fast local encoders: the ONNX builds (fp32, the default, and int8) of the bundled model, their cache,
and what depends on them.

Two real builds (export, and quantisation for int8; about 30 s each) into a temporary cache serve the
module; the damaged-cache test builds once more. The reference is the real sentence-transformers model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from obsmem import Obsmem
from obsmem.errors import SemanticSettingsMismatch
from obsmem.indexer import encoder_build
from obsmem.indexer.embed_local import LocalEmbedder, bundled_model_path
from obsmem.indexer.embed_onnx import OnnxEmbedder
from obsmem.indexer.embedders import make_embedder
from obsmem.indexer.encoder_build import MANIFEST_FILE, MODEL_FILE, ensure_encoder
from obsmem.indexer.encoder_smoothing import smooth
from obsmem.sample import observations, questions
from obsmem.settings import EmbeddingSettings, load_settings
from support.semantic_service import add_memories

MEMORIES = [
    ("2024-03-01 09:00", "stabilised auth e2e by mocking the clock"),
    ("2024-03-02 10:00", "upgraded postgres from 14 to 16 and ran a full reindex"),
    ("2024-03-04 12:00", "arm64 runners fail the docker build because of a missing base image"),
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache holding a real build of each fast encoder of the bundled model."""
    directory = tmp_path_factory.mktemp("encoders")
    for encoder in ("onnx-fp32", "onnx-int8"):
        built = ensure_encoder(bundled_model_path(), directory, encoder)
        assert built.built and built.model_file.is_file()
    return directory


@pytest.fixture(scope="module")
def fp32() -> Iterator[LocalEmbedder]:
    embedder = LocalEmbedder(EmbeddingSettings(encoder="torch-fp32"))
    yield embedder
    embedder.close()


def semantic(cache_dir: Path, **embedding: Any) -> dict[str, Any]:
    return {"embedding": {"cache_dir": str(cache_dir), **embedding}, "index": {"background": False}}


def test_default_encoder_gives_the_vectors_of_sentence_transformers(cache_dir: Path, fp32: LocalEmbedder) -> None:
    fast = make_embedder(EmbeddingSettings(cache_dir=str(cache_dir)))
    assert isinstance(fast, OnnxEmbedder) and fast.encoder == "onnx-fp32"
    texts = [item["content"] for item in observations()]
    cosines = (fast.embed_documents(texts) * fp32.embed_documents(texts)).sum(axis=1)
    assert cosines.min() >= 0.9999, cosines.min()


def test_int8_encoder_agrees_with_fp32_on_the_sample(cache_dir: Path, fp32: LocalEmbedder) -> None:
    fast = make_embedder(EmbeddingSettings(cache_dir=str(cache_dir), encoder="onnx-int8"))
    assert isinstance(fast, OnnxEmbedder)
    texts = [item["content"] for item in observations()]
    asked = [item["question"] for item in questions()]
    for batch in (texts, asked):
        cosines = (fast.embed_documents(batch) * fp32.embed_documents(batch)).sum(axis=1)
        assert cosines.mean() >= 0.995, cosines.mean()  # smoothed: 0.997 on LoCoMo turns (0.992 without)
        assert cosines.min() >= 0.98, cosines.min()
    # A query alone (no batch padding) gets the same vector as in a batch, and agrees with fp32 too.
    alone = fast.embed_query(asked[0])
    np.testing.assert_allclose(alone, fast.embed_documents([asked[0]])[0], atol=1e-5)
    assert float(alone @ fp32.embed_query(asked[0])) >= 0.98


def test_smoothing_leaves_the_fp32_model_computing_the_same_vectors(cache_dir: Path, tmp_path: Path) -> None:
    """Smoothing moves range from the activations into the weights: the fp32 graph after it is the same
    function, so only the int8 quantisation that follows changes anything."""
    import onnxruntime

    built = ensure_encoder(bundled_model_path(), cache_dir, "onnx-fp32")
    texts = [item["content"] for item in observations()][:24]
    smoothed = tmp_path / "smoothed.onnx"
    assert smooth(built.model_file, built.tokenizer_file, smoothed, texts, max_length=built.max_seq_length) == 24
    with open(smoothed, "rb") as handle:
        assert b"_smoothed" in handle.read()  # the Mul nodes are in the graph
    tokenizer = OnnxEmbedder(EmbeddingSettings(cache_dir=str(cache_dir)))._new_tokenizer()
    encodings = tokenizer.encode_batch(texts)
    feed = {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
    }
    before, after = (
        onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feed)[0]
        for path in (built.model_file, smoothed)
    )
    np.testing.assert_allclose(after, before, rtol=1e-3, atol=1e-4)


def test_batches_encoded_side_by_side_give_the_vectors_of_one_worker(cache_dir: Path) -> None:
    """Indexing on several cores runs single-threaded batches side by side: the vectors, and their order,
    are those of one worker taking the batches in turn."""
    fast = OnnxEmbedder(EmbeddingSettings(cache_dir=str(cache_dir), batch_size=4))
    texts = [item["content"] for item in observations()][:37]  # 10 batches, the last one short
    fast.document_threads = 1
    alone = fast.embed_documents(texts)
    fast.document_threads = 3
    side_by_side = fast.embed_documents(texts)
    np.testing.assert_array_equal(side_by_side, alone)
    assert (side_by_side @ alone.T).argmax(axis=1).tolist() == list(range(len(texts)))
    assert 1 <= fast._tokenizers.idle("documents") <= 3  # one tokenizer per worker at most, kept for reuse


def test_cached_build_is_reused_and_verified(cache_dir: Path) -> None:
    again = ensure_encoder(bundled_model_path(), cache_dir, "onnx-int8")
    assert not again.built
    manifest = json.loads((again.directory / MANIFEST_FILE).read_text())
    assert manifest["weights_sha256"] == again.weights_sha256
    assert manifest["recipe"] == encoder_build.RECIPES["onnx-int8"] == again.directory.name.split("-", 1)[1]
    assert manifest["model_bytes"] == again.model_file.stat().st_size
    assert again.directory.name.startswith(again.weights_sha256[:24])
    # Only the published entry and the bookkeeping are left: no half-built directory.
    assert sorted(p.name for p in cache_dir.iterdir() if p.name.startswith(".")) == [".build.lock", ".hashes"]


def test_damaged_cache_is_rebuilt(cache_dir: Path, tmp_path: Path) -> None:
    own = tmp_path / "encoders"
    entry = ensure_encoder(bundled_model_path(), cache_dir, "onnx-int8").directory
    # Start from a copy of the good entry, then damage one byte in the middle of the model.
    import shutil

    shutil.copytree(cache_dir, own)
    model = own / entry.name / MODEL_FILE
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF
    model.write_bytes(bytes(data))
    rebuilt = ensure_encoder(bundled_model_path(), own, "onnx-int8")
    assert rebuilt.built and rebuilt.directory == own / entry.name
    assert encoder_build.file_sha256(rebuilt.model_file) == encoder_build.file_sha256(entry / MODEL_FILE)
    assert not any(p.name.startswith((".damaged-", ".building-")) for p in own.iterdir())


def test_failed_build_publishes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A build that dies halfway (here: the export writes part of a model, then fails) leaves no entry, so
    the next start builds again instead of loading half a model."""

    def export_then_fail(model_dir: Path, work: Path, *, quantise: bool) -> int:
        (work / MODEL_FILE).write_bytes(b"half a model")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(encoder_build, "_export", export_then_fail)
    with pytest.raises(OSError):
        ensure_encoder(bundled_model_path(), tmp_path)
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == []
    assert not any(p.name.startswith(".building-") for p in tmp_path.iterdir())


def test_weights_hash_follows_the_files(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.bin").write_bytes(b"a" * 100)
    cache = tmp_path / "cache"
    cache.mkdir()
    first = encoder_build.weights_hash(model, cache)
    assert encoder_build.weights_hash(model, cache) == first  # remembered
    (model / "weights.bin").write_bytes(b"b" * 101)
    assert encoder_build.weights_hash(model, cache) != first


def test_one_shot_index_uses_every_core(cache_dir: Path) -> None:
    embedder = OnnxEmbedder(EmbeddingSettings(cache_dir=str(cache_dir)))
    serving = embedder.document_threads
    assert serving == max(1, (os.cpu_count() or 1) - 1)
    with embedder.every_core():
        assert embedder.document_threads == (os.cpu_count() or 1)
    assert embedder.document_threads == serving
    pinned = OnnxEmbedder(EmbeddingSettings(cache_dir=str(cache_dir), threads=1))
    with pinned.every_core():
        assert pinned.document_threads == 1  # a configured count wins


def _signature(service: Obsmem, project: str) -> str:
    with service.database(project).read() as conn:
        return str(conn.execute("SELECT signature FROM semantic_state WHERE id = 1").fetchone()[0])


def test_changing_the_encoder_rebuilds_the_index(tmp_path: Path, cache_dir: Path) -> None:
    fast = semantic(cache_dir)
    with Obsmem(load_settings(data_dir=tmp_path, semantic=fast)) as service:
        add_memories(service, "app", MEMORIES)
        assert service.index("app").totals.chunks_embedded == 3
        assert json.loads(_signature(service, "app"))["embedder"].startswith("onnx:onnx-fp32")
        assert service.search("app", "database upgrade").hits[0].content == MEMORIES[1][1]
    reference = semantic(cache_dir, encoder="onnx-int8")
    with Obsmem(load_settings(data_dir=tmp_path, semantic=reference)) as service:
        # An index built by the other encoder is never searched with this one, nor rebuilt unasked.
        with pytest.raises(SemanticSettingsMismatch) as refused:
            service.search("app", "database upgrade")
        assert "(they differ in: embedding)" in refused.value.message
        assert service.status("app").indexed_count == 0
        report = service.index("app")
        assert report.totals.reset and report.totals.chunks_embedded == 3
        assert json.loads(_signature(service, "app"))["embedder"].startswith("onnx:onnx-int8")
        assert service.search("app", "database upgrade").hits[0].content == MEMORIES[1][1]


def test_cli_search_loads_no_torch_and_prints_nothing_on_stderr(tmp_path: Path, cache_dir: Path) -> None:
    data = tmp_path / "data"
    config = tmp_path / "obsmem.toml"
    # No background indexer while the test indexes in the foreground (it would hold the project's lock).
    config.write_text(
        f'[semantic]\n[semantic.embedding]\ncache_dir = "{cache_dir}"\n[semantic.index]\nbackground = false\n'
    )
    with Obsmem(load_settings(config, data_dir=data)) as service:
        add_memories(service, "app", MEMORIES)
        service.index("app")
    probe = (
        "import sys\n"
        "from obsmem.surfaces.cli import main\n"
        "try:\n"
        "    main(sys.argv[1:])\n"
        "except SystemExit as done:\n"
        "    assert not done.code, done.code\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
    )
    args = ["--config", str(config), "--data-dir", str(data), "search", "app", "database upgrade", "--json"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OBSMEM_")}
    done = subprocess.run(
        [sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no model-load progress bar, no warning
    payload, _, heavy = done.stdout.rpartition("HEAVY")
    assert heavy.strip() == "[]"
    result = json.loads(payload)
    assert result["mode"] == "hybrid" and result["hits"][0]["content"] == MEMORIES[1][1]


def test_encoder_build_command_verifies_the_cached_build(tmp_path: Path, cache_dir: Path) -> None:
    from click.testing import CliRunner

    from obsmem.surfaces.cli import cli

    config = tmp_path / "obsmem.toml"
    config.write_text(f'[semantic]\n[semantic.embedding]\nencoder = "onnx-int8"\ncache_dir = "{cache_dir}"\n')
    result = CliRunner().invoke(cli, ["--config", str(config), "encoder", "build", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["built"] is False and Path(summary["directory"]).parent == cache_dir
    assert Path(summary["directory"]).name.endswith(encoder_build.RECIPES["onnx-int8"])
    config.write_text('[semantic]\n[semantic.embedding]\nencoder = "torch-fp32"\n')
    refused = CliRunner().invoke(cli, ["--config", str(config), "encoder", "build"])
    assert refused.exit_code == 2 and "error: mode_unavailable:" in refused.output
