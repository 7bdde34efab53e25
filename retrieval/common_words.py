"""The query vector with the index's common words at half weight (``[semantic.fusion] common_word_share``).

The keyword list weighs each word of a question by how rare it is among the indexed chunks (BM25's IDF); the
vector list weighs it as the model does, however many chunks hold it. A word that a large share of the
chunks hold says little about which one is meant, yet it pulls the query vector towards all of them. A
speaker's name in a conversation is the plain case: sentence vectors write each line's label on every
sentence ("Caroline: ..."), so "What did Caroline research?" is drawn to every line Caroline said, and a
question that names the other speaker than the one who did the thing is drawn away from the answer.

Hybrid search therefore embeds the question twice, as written and without those words, and searches with
the normalised mean of the two vectors: such a word still counts, half as much. The counts are the keyword
list's own (cached). On SQLite they stop at ``max_postings`` + 1, counted from the most recently indexed
chunk back; a word whose count stops there is common when it is at both ends of the index: it holds the
share in the stretch that count covered and, counted again from the first indexed chunk on, in that
stretch too (:func:`estimated_count` scales each to the whole index; the smaller counts). A burst of
recent chunks, or the events a rebuild indexes after the memories, does not make a word common by
itself. PostgreSQL keeps exact counts. Measured in docs/eval.md ("Common words at half weight").
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

import numpy as np

from obsmem.retrieval.bm25 import ENGLISH_STOPWORDS, query_word_spans
from obsmem.retrieval.names import CALENDAR_WORDS

_OPENING = "\"'`\u2018\u201c([{"
_ENDING = "\"'`\u2019\u201d)]},;:!?"
# A quote or bracket pair that encloses a cut word alone goes with it: opening -> closing.
_PAIRS = {'"': '"', "'": "'", "`": "`", "\u2018": "\u2019", "\u201c": "\u201d", "(": ")", "[": "]", "{": "}"}
# What stands between a cut word and the text either side of it: spaces and at most one mark before it; after
# it, a comma, semicolon or colon, or marks that end a sentence (followed by a space or the end).
# A mark doubled (``std::``) is part of what it stands in, never the cut's.
_BEFORE_CUT = re.compile(r"(?:(?<![,;:])\s*[,;:])?\s*$")
_AFTER_CUT = re.compile(r"\s*(?:[,;:](?![,;:])|[.!?]+(?=\s|$))?\s*")
_SENTENCE_END = ".!?"
# Below this many indexed chunks a share says little (one chunk holds every word of its own), so nothing
# is common there.
MIN_CHUNKS = 20


def common_words(
    counts: Mapping[str, int], chunks: int, share: float, never: Collection[str] = frozenset()
) -> set[str]:
    """The words held by at least ``share`` of the ``chunks`` indexed chunks (``counts``: chunks per word,
    as the keyword list counts them). None with ``share`` 0 (off) or in an index of fewer than
    :data:`MIN_CHUNKS` chunks. Never a word of ``never`` (the caller's: words the index holds as it holds a
    stopword or a calendar word, whose counts Porter stemming merges: ``does`` into ``doe``, ``on`` into
    ``one``, ``March`` into ``marching``), nor a number or a calendar word: every keyword document writes its
    date as words (``8 May 2023``), so their counts say nothing of the texts the vectors embed."""
    if share <= 0 or chunks < MIN_CHUNKS:
        return set()
    return {
        word for word, count in counts.items() if count >= share * chunks and word not in never and may_be_common(word)
    }


def estimated_count(counted: int, stretch: int, chunks: int) -> int:
    """The chunks of an index of ``chunks`` that hold a word found in ``counted`` of a stretch of ``stretch``
    chunks at one end of it (a count that stopped at its bound), as if the word were as frequent in the
    rest. A stretch shorter than the count (the in-memory vectors behind the keyword index) proves nothing
    more than the count."""
    if stretch < counted or stretch <= 0:
        return counted
    return max(counted, counted * chunks // stretch)


def may_be_common(word: str) -> bool:
    """Whether ``word`` can be a common word at all: never a number or a calendar word (every keyword
    document writes its date as words, ``8 May 2023``, so their counts say nothing of the texts the vectors
    embed)."""
    return word not in CALENDAR_WORDS and not any(character.isdigit() for character in word)


def without_words(query: str, dropped: Collection[str]) -> str | None:
    """``query`` with every word in ``dropped`` (spelt as :func:`~obsmem.retrieval.bm25.query_words` spells
    it: lowercased, possessive and contraction suffixes aside) cut out where it stands alone, or None when
    no word is cut or no word but stopwords would be left (nothing to search for). A word inside an
    identifier or a path (``LK`` of ``LK_RATE_LIMIT``, ``src`` of ``src/app.py``, ``py``) stays: cutting it
    would garble the rest. Each cut is tidied where it stood (:func:`_cut`), nowhere else."""
    spans = query_word_spans(query)
    cut = [(start, end) for start, end, word in spans if word in dropped and _stands_alone(query, start, end)]
    cut_words = {word for start, end, word in spans if (start, end) in cut}
    if not cut or not any(word not in cut_words and word not in ENGLISH_STOPWORDS for _, _, word in spans):
        return None
    text = query
    for start, end in reversed(cut):  # from the right: the spans left of a cut keep their places
        text = _cut(text, start, end)
    return text


def _cut(text: str, start: int, end: int) -> str:
    """``text`` without ``text[start:end]``, tidied only where it stood: a quote or bracket pair around it
    alone goes with it, and the marks and spaces either side of it become one (a sentence's end kept,
    nothing left at the start). The rest of the text (a path's ``.env``, ``std::vector``) is untouched."""
    if start > 0 and end < len(text) and _PAIRS.get(text[start - 1]) == text[end]:
        start, end = start - 1, end + 1
    left, right = text[:start], text[end:]
    before = _BEFORE_CUT.search(left)
    after = _AFTER_CUT.match(right)
    assert before is not None and after is not None  # both may match nothing
    left_core, right_core = left[: before.start()], right[after.end() :]
    marks_before, marks_after = before.group().strip(), after.group().strip()
    if not left_core:
        return right_core
    sentence_end = marks_after if marks_after and marks_after[0] in _SENTENCE_END else ""
    if not right_core:
        return left_core + sentence_end
    return f"{left_core}{sentence_end or marks_before or marks_after} {right_core}"


def _stands_alone(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` is a word of its own: space or an opening mark before it, space or
    punctuation that ends a word after it (a full stop only before a space or the end)."""
    before = text[start - 1] if start > 0 else " "
    after = text[end] if end < len(text) else " "
    if after == ".":
        after = text[end + 1] if end + 1 < len(text) else " "
    return (before.isspace() or before in _OPENING) and (after.isspace() or after in _ENDING)


def half_weighted(whole: np.ndarray, without: np.ndarray) -> np.ndarray:
    """The normalised mean of the question's vector and its vector without the common words."""
    mean = _unit(whole) + _unit(without)
    # The two are embeddings of nearly the same text, never opposite; the floor only guards the division.
    return (mean / max(float(np.linalg.norm(mean)), 1e-12)).astype(np.float32)


def _unit(vector: np.ndarray) -> np.ndarray:
    """``vector`` at length 1 (a model served over HTTP need not normalise its vectors)."""
    as_float = vector.astype(np.float64)
    return as_float / max(float(np.linalg.norm(as_float)), 1e-12)
