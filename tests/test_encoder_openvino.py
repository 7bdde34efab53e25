"""The OpenVINO bf16 encoder (``openvino-bf16``): the ONNX export of the bundled model run by OpenVINO in bfloat16.

One real build of the export into a temporary cache serves the module (about 30 s); the reference is the real
sentence-transformers model. Skipped where the ``openvino`` package is not installed (it is optional).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from obsmem import Obsmem
from obsmem.errors import SemanticSettingsMismatch
from obsmem.indexer.embed_local import LocalEmbedder, bundled_model_path
from obsmem.indexer.embedders import make_embedder
from obsmem.indexer.encoder_build import ensure_encoder
from obsmem.sample import observations, questions
from obsmem.settings import EmbeddingSettings, load_settings
from support.semantic_service import add_memories

pytest.importorskip("openvino")

from obsmem.indexer.embed_openvino import QUERY_BUCKET, STATIC_QUERY_TOKENS, OpenVinoEmbedder  # noqa: E402

MEMORIES = [
    ("2024-03-01 09:00", "stabilised auth e2e by mocking the clock"),
    ("2024-03-02 10:00", "upgraded postgres from 14 to 16 and ran a full reindex"),
    ("2024-03-04 12:00", "arm64 runners fail the docker build because of a missing base image"),
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache holding a real ONNX export of the bundled model (what the OpenVINO encoder compiles)."""
    directory = tmp_path_factory.mktemp("encoders")
    assert ensure_encoder(bundled_model_path(), directory, "onnx-fp32").built
    return directory


@pytest.fixture(scope="module")
def fp32() -> Iterator[LocalEmbedder]:
    embedder = LocalEmbedder(EmbeddingSettings(encoder="torch-fp32"))
    yield embedder
    embedder.close()


@pytest.fixture(scope="module")
def bf16(cache_dir: Path) -> Iterator[OpenVinoEmbedder]:
    embedder = make_embedder(EmbeddingSettings(cache_dir=str(cache_dir), encoder="openvino-bf16"))
    assert isinstance(embedder, OpenVinoEmbedder)
    yield embedder
    embedder.close()


def semantic(cache_dir: Path, **embedding: Any) -> dict[str, Any]:
    return {"embedding": {"cache_dir": str(cache_dir), **embedding}, "index": {"background": False}}


def test_settings_accept_the_encoder_and_name_a_wrong_one() -> None:
    assert EmbeddingSettings(encoder="openvino-bf16").encoder == "openvino-bf16"
    with pytest.raises(ValidationError) as refused:
        EmbeddingSettings(encoder="openvino-int8")  # type: ignore[arg-type]
    assert "encoder" in str(refused.value) and "openvino-bf16" in str(refused.value)


def test_vectors_are_those_of_sentence_transformers(bf16: OpenVinoEmbedder, fp32: LocalEmbedder) -> None:
    """bf16 keeps fp32's exponent: the vectors agree with fp32's to a cosine of 0.9999 (measured 0.99998 on
    LoCoMo), where the int8 build reaches 0.997 on average."""
    texts = [item["content"] for item in observations()]
    asked = [item["question"] for item in questions()]
    for batch in (texts, asked):
        cosines = (bf16.embed_documents(batch) * fp32.embed_documents(batch)).sum(axis=1)
        assert cosines.min() >= 0.9999, cosines.min()
    for question in asked[:10]:
        assert float(bf16.embed_query(question) @ fp32.embed_query(question)) >= 0.9999


def test_a_query_padded_to_its_bucket_gets_the_vector_of_its_own_length(
    bf16: OpenVinoEmbedder, fp32: LocalEmbedder
) -> None:
    """Queries run on models compiled for lengths rounded up to a bucket (padding masked out), and longer ones
    on the dynamic model: whatever the path, the vector is the one of the text alone."""
    lengths = set()
    for words in (1, QUERY_BUCKET - 3, QUERY_BUCKET, QUERY_BUCKET + 5, STATIC_QUERY_TOKENS + 10, 400):
        query = " ".join(["database"] * words)
        with bf16._tokenizers.borrow("query") as tokenizer:
            lengths.add(len(tokenizer.encode(query).ids))
        alone = bf16.embed_query(query)
        assert float(alone @ fp32.embed_query(query)) >= 0.9999
        assert float(alone @ bf16.embed_documents([query])[0]) >= 0.9999  # the dynamic model, unpadded
    assert max(lengths) > STATIC_QUERY_TOKENS  # the dynamic path was taken
    assert set(bf16._queries) == {0, QUERY_BUCKET, 2 * QUERY_BUCKET}  # 1 and 14 tokens share a bucket


def test_batches_encoded_side_by_side_give_the_vectors_of_one_worker(cache_dir: Path) -> None:
    embedder = OpenVinoEmbedder(EmbeddingSettings(cache_dir=str(cache_dir), encoder="openvino-bf16", batch_size=4))
    texts = [item["content"] for item in observations()][:37]  # 10 batches, the last one short
    embedder.document_threads = 1
    alone = embedder.embed_documents(texts)
    embedder.document_threads = 3
    side_by_side = embedder.embed_documents(texts)
    np.testing.assert_allclose(side_by_side, alone, atol=1e-5)
    assert (side_by_side @ alone.T).argmax(axis=1).tolist() == list(range(len(texts)))
    embedder.close()


def _signature(service: Obsmem, project: str) -> str:
    with service.database(project).read() as conn:
        return str(conn.execute("SELECT signature FROM semantic_state WHERE id = 1").fetchone()[0])


def test_switching_to_the_encoder_rebuilds_the_index(tmp_path: Path, cache_dir: Path) -> None:
    with Obsmem(load_settings(data_dir=tmp_path, semantic=semantic(cache_dir, encoder="onnx-fp32"))) as service:
        add_memories(service, "app", MEMORIES)
        assert service.index("app").totals.chunks_embedded == 3
        assert json.loads(_signature(service, "app"))["embedder"].startswith("onnx:onnx-fp32")
    with Obsmem(load_settings(data_dir=tmp_path, semantic=semantic(cache_dir, encoder="openvino-bf16"))) as service:
        with pytest.raises(SemanticSettingsMismatch):  # never searched with vectors of another encoder
            service.search("app", "database upgrade")
        report = service.index("app")
        assert report.totals.reset and report.totals.chunks_embedded == 3
        embedder = json.loads(_signature(service, "app"))["embedder"]
        assert embedder == "openvino:openvino-bf16-1:onnx-fp32-1:all-MiniLM-L6-v2"
        assert service.search("app", "database upgrade").hits[0].content == MEMORIES[1][1]


def test_encoder_build_command_builds_the_export_it_compiles(tmp_path: Path, cache_dir: Path) -> None:
    from click.testing import CliRunner

    from obsmem.surfaces.cli import cli

    config = tmp_path / "obsmem.toml"
    config.write_text(f'[semantic]\n[semantic.embedding]\nencoder = "openvino-bf16"\ncache_dir = "{cache_dir}"\n')
    result = CliRunner().invoke(cli, ["--config", str(config), "encoder", "build", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["built"] is False and Path(summary["directory"]).name.endswith("onnx-fp32-1")
