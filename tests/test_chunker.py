"""Chunker invariants (Hypothesis) and its edge cases."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from obsmem.indexer.chunker import ChunkSettings, chunk_key, chunk_text

texts = st.text(alphabet=st.sampled_from(list("ab c\n") + ["é", "✓", "😀", "中"]), min_size=0, max_size=400)
chunkings = st.builds(
    lambda size, overlap_fraction, lines: ChunkSettings(size, int((size - 1) * overlap_fraction), lines),
    st.integers(min_value=4, max_value=64),
    st.floats(min_value=0, max_value=0.9),
    st.integers(min_value=1, max_value=6),
)


@settings(max_examples=300, deadline=None)
@given(texts, chunkings)
def test_chunks_cover_the_text_within_limits(text: str, chunking: ChunkSettings) -> None:
    data = text.encode("utf-8")
    chunks = chunk_text("m" * 64, text, chunking)
    if not data:
        assert chunks == []
        return
    assert chunks[0].start == 0 and chunks[-1].end == len(data)
    for position, chunk in enumerate(chunks):
        assert chunk.position == position
        assert data[chunk.start : chunk.end].decode("utf-8") == chunk.text  # whole characters only
        assert 0 < chunk.end - chunk.start <= chunking.chunk_bytes
        lines = chunk.text.count("\n") + (0 if chunk.text.endswith("\n") else 1)
        assert lines <= chunking.max_lines
    for before, after in zip(chunks, chunks[1:], strict=False):
        assert before.start < after.start <= before.end  # no gaps, always progress
        assert before.end - after.start <= chunking.overlap_bytes + 3  # overlap, rounded to a character
    assert len({c.key for c in chunks}) == len(chunks)


def test_defaults_and_overlap() -> None:
    text = " ".join(f"word{i}" for i in range(400))
    chunks = chunk_text("a" * 64, text, ChunkSettings())
    assert [len(c.text.encode()) <= 1200 for c in chunks] == [True] * len(chunks)
    assert len(chunks) == 3
    assert chunks[0].end - chunks[1].start >= 150  # about 192 bytes shared
    assert chunks[0].text.endswith(" ")  # cut at a space, not inside a word


def test_line_cap() -> None:
    text = "\n".join(f"line {i}" for i in range(200))
    chunks = chunk_text("a" * 64, text, ChunkSettings(chunk_bytes=100_000, overlap_bytes=10, max_lines=80))
    assert [c.text.count("\n") for c in chunks] == [80, 80, 39]


def test_key_depends_on_parent_position_and_text() -> None:
    assert chunk_key("a", 0, "x") != chunk_key("b", 0, "x")
    assert chunk_key("a", 0, "x") != chunk_key("a", 1, "x")
    assert chunk_key("a", 0, "x") != chunk_key("a", 0, "y")
    assert chunk_key("a", 0, "x") == chunk_key("a", 0, "x")


def test_invalid_utf8_is_rejected() -> None:
    with pytest.raises(ValueError, match="UTF-8"):
        chunk_text("a", b"ok \xff\xfe", ChunkSettings())
    with pytest.raises(ValueError, match="UTF-8"):
        chunk_text("a", "lone \ud800 surrogate", ChunkSettings())
    assert chunk_text("a", "héllo".encode(), ChunkSettings())[0].text == "héllo"


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        ChunkSettings(chunk_bytes=3)
    with pytest.raises(ValueError):
        ChunkSettings(chunk_bytes=10, overlap_bytes=10)
