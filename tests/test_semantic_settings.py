"""The [semantic] settings section: defaults, the TOML file, and clear configuration errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from obsmem.errors import ConfigurationError
from obsmem.settings import load_settings


def test_absent_section_means_exact(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path)
    assert settings.semantic is None and not settings.semantic_enabled


def test_toml_section_and_defaults(tmp_path: Path) -> None:
    (tmp_path / "obsmem.toml").write_text(
        "[semantic]\nchunk_bytes = 800\n[semantic.fusion]\nweights = { vector = 0.5 }\n"
        '[semantic.reranker]\nprovider = "http"\nbase_url = "http://127.0.0.1:9/v1/"\nmodel_id = "r"\nmin_score = -4\n'
    )
    settings = load_settings(data_dir=tmp_path)
    semantic = settings.semantic
    assert settings.semantic_enabled and semantic is not None
    assert (semantic.chunk_bytes, semantic.overlap_bytes, semantic.max_lines) == (800, 192, 80)
    assert semantic.embedding.provider == "local" and semantic.embedding.model == ""
    assert semantic.fusion.method == "convex" and semantic.fusion.weights == {"bm25": 1.25, "vector": 0.5}
    assert semantic.fusion.neighbour_weight == 0.2 and semantic.min_relevance is None
    assert semantic.fusion.bm25_full_coverage == 0.2
    assert semantic.bm25.tokenizer == "porter unicode61 remove_diacritics 2"
    assert semantic.bm25.column_weights == {"body": 1.0, "previous": 0.5, "next": 0.2, "date": 2.0}
    assert semantic.bm25.context_characters == 300 and semantic.index.exact_scan_max_chunks is None
    assert semantic.fusion.candidates_per_list == 100 and semantic.fusion.fused_candidates == 200
    assert semantic.fusion.rrf_k == 60
    assert semantic.reranker is not None and semantic.reranker.base_url == "http://127.0.0.1:9/v1"
    assert (semantic.reranker.batch_size, semantic.reranker.document_characters) == (8, 768)


def test_fusion_weights_default_per_method(tmp_path: Path) -> None:
    rrf = load_settings(data_dir=tmp_path, semantic={"fusion": {"method": "rrf"}}).semantic
    assert rrf is not None and rrf.fusion.weights == {"bm25": 1.0, "vector": 1.0} and rrf.fusion.rrf_k == 60
    convex = load_settings(data_dir=tmp_path, semantic={}).semantic
    assert convex is not None and convex.fusion.weights == {"bm25": 1.25, "vector": 0.6}
    partial = load_settings(data_dir=tmp_path, semantic={"bm25": {"column_weights": {"next": 0.5}}}).semantic
    assert partial is not None
    assert partial.bm25.column_weights == {"body": 1.0, "previous": 0.5, "next": 0.5, "date": 2.0}


def test_environment_turns_it_on(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OBSMEM_SEMANTIC__CHUNK_BYTES", "600")
    assert load_settings(data_dir=tmp_path).semantic.chunk_bytes == 600


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"chunk_bytes": 3}, "semantic.chunk_bytes: Input should be greater than or equal to 4"),
        ({"chunk_bytes": 100, "overlap_bytes": 100}, "overlap_bytes must be smaller than chunk_bytes"),
        ({"overlap_bytes": -1}, "semantic.overlap_bytes"),
        ({"max_lines": 0}, "semantic.max_lines"),
        ({"embedding": {"batch_size": 0}}, "semantic.embedding.batch_size"),
        ({"embedding": {"sentences": "max"}}, "semantic.embedding.sentences"),
        ({"embedding": {"provider": "openai"}}, "provider 'openai' needs both base_url and model_id"),
        (
            {"embedding": {"provider": "openai", "base_url": "ftp://x", "model_id": "m"}},
            "http:// or https://",
        ),
        (
            {"embedding": {"provider": "openai", "base_url": "http://u:p@h/v1", "model_id": "m"}},
            "credentials",
        ),
        ({"embedding": {"base_url": "http://h/v1"}}, "provider 'local' uses model"),
        ({"reranker": {"provider": "http"}}, "provider 'http' needs both base_url and model_id"),
        ({"reranker": {"provider": "local"}}, "provider 'local' needs model"),
        (
            {"reranker": {"provider": "http", "base_url": "http://h", "model_id": "m", "batch_size": 0}},
            "semantic.reranker.batch_size",
        ),
        (
            {
                "reranker": {
                    "provider": "http",
                    "base_url": "http://h",
                    "model_id": "m",
                    "document_characters": -5,
                }
            },
            "semantic.reranker.document_characters",
        ),
        (
            {
                "reranker": {
                    "provider": "http",
                    "base_url": "http://h",
                    "model_id": "m",
                    "min_score": float("nan"),
                }
            },
            "min_score",
        ),
        (
            {"enabled": False, "reranker": {"provider": "http", "base_url": "http://h", "model_id": "m"}},
            "a reranker needs embeddings",
        ),
        ({"fusion": {"weights": {"bm25": 0, "vector": 0}}}, "at least one list"),
        ({"fusion": {"weights": {"bm25": -1}}}, "must be a finite number >= 0"),
        ({"fusion": {"weights": {"title": 1}}}, "semantic.fusion.weights"),
        ({"fusion": {"method": "borda"}}, "semantic.fusion.method"),
        ({"fusion": {"neighbour_weight": -0.1}}, "semantic.fusion.neighbour_weight"),
        ({"fusion": {"session_weight": 1.5}}, "semantic.fusion.session_weight"),
        ({"fusion": {"session_weight": -0.1}}, "semantic.fusion.session_weight"),
        ({"fusion": {"bm25_full_coverage": 1.5}}, "semantic.fusion.bm25_full_coverage"),
        ({"min_relevance": float("nan")}, "min_relevance must be a finite number"),
        ({"min_relevance": 0.4, "fusion": {"method": "rrf"}}, "min_relevance needs fusion method 'convex'"),
        ({"bm25": {"column_weights": {"title": 1}}}, "semantic.bm25.column_weights"),
        ({"bm25": {"column_weights": {"date": float("inf")}}}, "must be a finite number >= 0"),
        ({"bm25": {"column_weights": {"body": 0}}}, "'body' must be above 0"),
        ({"bm25": {"context_characters": -1}}, "semantic.bm25.context_characters"),
        ({"index": {"exact_scan_max_chunks": -1}}, "semantic.index.exact_scan_max_chunks"),
        ({"bm25": {"tokenizer": "nope"}}, "FTS5 does not accept this tokenizer"),
        ({"bm25": {"tokenizer": "unicode61' ); DROP TABLE memories; --"}}, "may contain only"),
        ({"colour": "blue"}, "semantic.colour"),
    ],
)
def test_configuration_errors_are_clear(tmp_path: Path, section: dict, message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_settings(data_dir=tmp_path, semantic=section)
    assert message in caught.value.message
