"""Chunker: UTF-8-safe byte windows with overlap and a line cap.

A memory becomes one or more chunks of at most ``chunk_bytes`` UTF-8 bytes and ``max_lines`` lines.
Neighbouring chunks share about ``overlap_bytes`` bytes, so a phrase cut by a window boundary is whole in
one of them. A window never ends inside a multi-byte character (``chunk_bytes >= 4`` guarantees room for
one); when it can, it ends at a space or line break in its last quarter rather than inside a word. A
window that ends after a line break (as the line cap makes it) is followed without overlap.

A chunk's key is derived from its parent memory id, its position and its text, so re-chunking the same
memory with the same settings gives the same keys (and their stored embeddings can be reused).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from obsmem.ids import canonical_json


@dataclass(frozen=True)
class ChunkSettings:
    chunk_bytes: int = 1200
    overlap_bytes: int = 192
    max_lines: int = 80

    def __post_init__(self) -> None:
        if self.chunk_bytes < 4:
            raise ValueError("chunk_bytes must be at least 4")
        if not 0 <= self.overlap_bytes < self.chunk_bytes:
            raise ValueError("overlap_bytes must be >= 0 and smaller than chunk_bytes")
        if self.max_lines < 1:
            raise ValueError("max_lines must be positive")


@dataclass(frozen=True)
class Chunk:
    position: int
    start: int  # byte offsets in the UTF-8 text, end exclusive
    end: int
    text: str
    key: str


def chunk_key(memory_id: str, position: int, text: str) -> str:
    return hashlib.sha256(canonical_json(["chunk", memory_id, position, text])).hexdigest()


def _utf8(text: str | bytes) -> bytes:
    if isinstance(text, bytes):
        try:
            text.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("text is not valid UTF-8") from None
        return text
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text is not valid UTF-8 (it holds a lone surrogate)") from None


def _is_continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def _window_end(data: bytes, start: int, settings: ChunkSettings) -> tuple[int, bool]:
    """Where the chunk starting at ``start`` ends, and whether the line cap chose it."""
    size = len(data)
    end = min(start + settings.chunk_bytes, size)
    while end < size and _is_continuation(data[end]):
        end -= 1
    newline = start - 1
    for _ in range(settings.max_lines):
        newline = data.find(b"\n", newline + 1, end)
        if newline < 0:
            break
    else:
        if newline + 1 < end:  # more text after the max_lines-th line break: cut there
            return newline + 1, True
    if end < size:
        floor = start + max(settings.overlap_bytes + 1, (end - start) * 3 // 4)
        boundary = max(data.rfind(b" ", floor, end), data.rfind(b"\n", floor, end))
        if boundary >= floor:
            end = boundary + 1
    return end, False


def chunk_text(memory_id: str, text: str | bytes, settings: ChunkSettings) -> list[Chunk]:
    """Split ``text`` into chunks; raises ValueError for text that is not valid UTF-8."""
    data = _utf8(text)
    chunks: list[Chunk] = []
    start = 0
    while start < len(data):
        end, at_line_cap = _window_end(data, start, settings)
        piece = data[start:end].decode("utf-8")
        position = len(chunks)
        chunks.append(Chunk(position, start, end, piece, chunk_key(memory_id, position, piece)))
        if end >= len(data):
            break
        # A line break is a natural boundary: the next chunk starts right after it, without overlap
        # (an overlap there would give a chunk that lies wholly inside this one).
        following = end if at_line_cap or data[end - 1] == 0x0A else end - settings.overlap_bytes
        while _is_continuation(data[following]):
            following += 1
        start = following if following > start else end
    return chunks
