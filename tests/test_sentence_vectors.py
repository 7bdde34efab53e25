"""Sentence vectors (``[semantic.embedding] sentences = "mean"``): a chunk of several sentences is embedded
sentence by sentence, each with its line's label, and its one vector is the normalised mean of
theirs; the setting is part of the index signature, so changing it rebuilds the index."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from obsmem import Obsmem
from obsmem.errors import SemanticSettingsMismatch
from obsmem.indexer.embedders import make_embedder
from obsmem.indexer.sentences import mean_of_pieces, sentence_pieces, split_for_embedding
from obsmem.settings import EmbeddingSettings, load_settings
from support.semantic_service import add_memories

TURN = "Caroline: I went to the LGBTQ support group yesterday. It was so powerful to hear the stories there."


def test_a_labelled_turn_is_cut_into_sentences_that_keep_the_label() -> None:
    assert sentence_pieces(TURN) == [
        "Caroline: I went to the LGBTQ support group yesterday.",
        "Caroline: It was so powerful to hear the stories there.",
    ]


@pytest.mark.parametrize(
    "text",
    [
        "Melanie: Wow! That sounds great, tell me more.",  # one piece of three words or more
        "Bumped the pool in src/db/pool.py to 20 after v1.2. timeouts fell.",  # a path, a version, no capital
        "Decision: keep Redis, e.g. for sessions and rate limits.",  # an abbreviation is not a sentence end
        "Fix: a POSIX TZ string (e.g. CET-1CEST,M3.5.0,M10.5.0/3) set by the app, recomputed every run.",
        "Bob: I met J. Smith and Dr. Ruiz at the clinic today.",
        'Tim: There is a quote by J.K. Rowling that I really like: "Turn on the light."',
        "The repeated query was SELECT ... FROM invoice_line_items, once per invoice (50 times).",  # an ellipsis
        "Set timeout=5400 on wait_for_orders_export",
        "",
    ],
)
def test_a_text_without_two_sentences_is_embedded_whole(text: str) -> None:
    assert sentence_pieces(text) == [text]


def test_unlabelled_sentences_are_cut_without_a_label() -> None:
    text = "Moved the cache to Memcached last week. The Redis cluster was too expensive to run."
    assert sentence_pieces(text) == [
        "Moved the cache to Memcached last week.",
        "The Redis cluster was too expensive to run.",
    ]


def test_each_speaker_of_a_transcript_labels_only_their_own_sentences() -> None:
    text = "user: please run the tests. Then tell me what failed.\nassistant: I ran the suite. Two tests failed."
    assert sentence_pieces(text) == [
        "user: please run the tests.",
        "user: Then tell me what failed.",
        "assistant: I ran the suite.",
        "assistant: Two tests failed.",
    ]
    before = "Notes from the call today.\nBob: First thing he said. Second thing he said."
    assert sentence_pieces(before) == [
        "Notes from the call today.",
        "Bob: First thing he said.",
        "Bob: Second thing he said.",
    ]


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        # a clause before a colon is no label: it stays in its sentence and goes on no other
        ("The fix is simple: change the config file. Then restart the server.", 2),
        ("Traceback (most recent call last): KeyError in the parser. It broke the import.", 2),
        ("def main(): returns early on an empty list. Callers never check it.", 2),
        ("See you on Jan. 5 at the office. It will be fun for everyone.", 2),  # a month's abbreviation
    ],
)
def test_only_a_short_name_before_a_colon_is_a_label(text: str, pieces: int) -> None:
    got = sentence_pieces(text)
    assert len(got) == pieces and " ".join(got) == text


def test_a_long_text_of_false_ends_is_left_whole() -> None:
    # Every candidate end is an initial, so none is cut. Each end looks back a bounded window for its last
    # word: the scan is linear (looking back to the last cut, as it first did, took minutes on this text).
    text = "A. " * 30_000
    assert sentence_pieces(text) == [text]


def test_pieces_know_their_text_and_average_to_unit_vectors() -> None:
    pieces, owners = split_for_embedding(["one whole text here", TURN, "Bob: Fine. Really fine today. Thanks a lot."])
    assert owners.tolist() == [0, 1, 1, 2, 2]
    assert pieces[3:] == ["Bob: Really fine today.", "Bob: Thanks a lot."]
    vectors = np.eye(5, 4, dtype=np.float32)[[0, 1, 2, 3, 3]]
    means = mean_of_pieces(vectors, owners, 3)
    assert np.allclose(np.linalg.norm(means, axis=1), 1.0)
    assert np.allclose(means[1], [0, 1 / np.sqrt(2), 1 / np.sqrt(2), 0])
    assert np.allclose(means[2], [0, 0, 0, 1])


def test_the_embedder_averages_the_real_models_sentence_vectors() -> None:
    whole = make_embedder(EmbeddingSettings(encoder="torch-fp32", sentences="whole"))
    mean = make_embedder(EmbeddingSettings(encoder="torch-fp32"))  # the default
    texts = [TURN, "Set timeout=5400 on wait_for_orders_export"]
    got = mean.embed_documents(texts)
    parts = whole.embed_documents(sentence_pieces(TURN))
    expected = parts.mean(axis=0) / np.linalg.norm(parts.mean(axis=0))
    assert np.allclose(got[0], expected, atol=1e-5)
    assert np.allclose(got[1], whole.embed_documents(texts[1:])[0], atol=1e-5)  # one sentence: unchanged
    assert float(got[0] @ whole.embed_documents([TURN])[0]) < 0.999  # the mean is not the whole text's vector
    # A question about the second sentence comes closer to the turn than with the whole text's vector.
    query = mean.embed_query("How did Caroline feel hearing the stories at the group?")
    assert float(got[0] @ query) > float(whole.embed_documents([TURN])[0] @ query)


def _signature(service: Obsmem, project: str) -> dict[str, object]:
    with service.database(project).read() as conn:
        return json.loads(str(conn.execute("SELECT signature FROM semantic_state WHERE id = 1").fetchone()[0]))


def test_changing_the_setting_rebuilds_the_index(tmp_path: Path) -> None:
    memories = [
        ("2024-03-01 09:00", TURN),
        ("2024-03-02 10:00", "Melanie: I painted a lake at sunrise last week. It took me three mornings to finish."),
    ]
    plain = {"embedding": {"encoder": "torch-fp32", "sentences": "whole"}, "index": {"background": False}}
    with Obsmem(load_settings(data_dir=tmp_path, semantic=plain)) as service:
        add_memories(service, "chat", memories)
        assert service.index("chat").totals.chunks_embedded == 2
        assert "sentences" not in _signature(service, "chat")  # as indexes built before the setting existed
    by_sentence = {"embedding": {"encoder": "torch-fp32"}, "index": {"background": False}}  # the default: mean
    with Obsmem(load_settings(data_dir=tmp_path, semantic=by_sentence)) as service:
        with pytest.raises(SemanticSettingsMismatch) as refused:  # never searched with vectors made the other way
            service.search("chat", "painting a lake", mode="hybrid")
        assert "(they differ in: embedding.sentences)" in refused.value.message
        report = service.index("chat")
        assert report.totals.reset and report.totals.chunks_embedded == 2
        assert _signature(service, "chat")["sentences"] == "mean"
        assert service.search("chat", "painting a lake", mode="hybrid").hits[0].content == memories[1][1]
