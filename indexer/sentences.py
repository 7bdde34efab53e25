"""A chunk's vector as the mean of its sentences' vectors (``[semantic.embedding] sentences = "mean"``).

all-MiniLM-L6-v2 pools every token of a text into one vector, so in a conversation turn of three sentences
the one a question is about has a third of the say, and the speaker's name, written once at the start, less
still. Embedding each sentence on its own (with its line's label, such as ``Caroline:``, on every
sentence, so each still says who speaks) and averaging the unit vectors gives every sentence an equal,
sharp share of the chunk's one vector. The index keeps one vector per chunk, so nothing else changes: the
graph, its size, search. Measured on LoCoMo in docs/eval.md ("Sentence vectors").

A text with fewer than two sentences of at least :data:`MIN_WORDS` words is embedded whole, as before.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

MIN_WORDS = 3  # a shorter piece ("Wow!", "Thanks.") says too little to stand as a sentence of its own
# A sentence ends at ., ! or ? followed by space and a capital, a digit or a quote: a path, a version or a
# decimal ("src/app.py", "v1.2", "3.5 s") is not cut, nor is "e.g. this", nor an ellipsis, which leaves
# something out mid-sentence ("SELECT ... FROM invoices").
SENTENCE_END = re.compile(r"(?<=[.!?])(?<!\.\.)\s+(?=[A-Z0-9\"'])")
# Words whose dot is no sentence end, though a capital may follow ("e.g. CET", "Dr. Ruiz"); so is an initial.
ABBREVIATIONS = frozenset(
    {"cf.", "vs.", "approx.", "fig.", "no.", "mr.", "mrs.", "ms.", "dr.", "st."}
    | {f"{month}." for month in ("jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec")}
)
INITIALS = re.compile(r"(?:[^\W\d_]\.)+")  # "J.", "J.K.", "U.S.", "e.g."
# A label: one to three words of letters, digits and - _ . ' before a colon and a space, at the start of the
# text or of a line ("Caroline: ", "user: ", "Decision for INC-0419: "). Not "The fix is simple: ", "def
# main():", "Traceback (most recent call last):" or "https://". Each line that starts with one starts a
# part of its own (a transcript of several speakers), whose sentences carry that label.
LABEL = re.compile(r"^[ \t]*([^\W_][\w.'-]*(?: [\w.'-]+){0,2}):[ \t]+", re.MULTILINE)
MAX_LABEL_CHARACTERS = 40
LAST_WORD_WINDOW = 64  # characters before a candidate end searched for its last word (keeps the cut linear)


def sentence_pieces(text: str) -> list[str]:
    """What to embed for ``text``: its sentences, each with its part's label, or the text whole."""
    sentences = [
        f"{label}: {sentence}" if label else sentence
        for label, body in _labelled_parts(text)
        for sentence in _sentences(body.strip())
        if len(sentence.split()) >= MIN_WORDS
    ]
    return sentences if len(sentences) >= 2 else [text]


def _labelled_parts(text: str) -> list[tuple[str, str]]:
    """The text cut where a line begins with a label, each part with its label ("" for text before the first)."""
    labels = [match for match in LABEL.finditer(text) if len(match.group(1)) <= MAX_LABEL_CHARACTERS]
    if not labels:
        return [("", text)]
    parts = [("", text[: labels[0].start()])] if text[: labels[0].start()].strip() else []
    for number, match in enumerate(labels):
        end = labels[number + 1].start() if number + 1 < len(labels) else len(text)
        parts.append((match.group(1), text[match.end() : end]))
    return parts


def _sentences(body: str) -> list[str]:
    parts: list[str] = []
    start = 0
    for end in SENTENCE_END.finditer(body):
        words = body[max(start, end.start() - LAST_WORD_WINDOW) : end.start()].split()
        last = words[-1].lstrip("([\"'").lower() if words else ""
        if last in ABBREVIATIONS or INITIALS.fullmatch(last):
            continue
        parts.append(body[start : end.start()])
        start = end.end()
    parts.append(body[start:])
    return parts


def split_for_embedding(texts: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Every text's pieces in one list, and the index of the text each piece belongs to."""
    pieces: list[str] = []
    owners: list[int] = []
    for index, text in enumerate(texts):
        for piece in sentence_pieces(text):
            pieces.append(piece)
            owners.append(index)
    return pieces, np.asarray(owners, dtype=np.int64)


def mean_of_pieces(vectors: np.ndarray, owners: np.ndarray, count: int) -> np.ndarray:
    """Each text's vector: the normalised mean of its pieces' unit vectors."""
    sums = np.zeros((count, vectors.shape[1]), dtype=np.float64)
    np.add.at(sums, owners, vectors.astype(np.float64))
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    # The floor only guards the division: the unit vectors of one text's sentences do not cancel out.
    return (sums / np.maximum(norms, 1e-12)).astype(np.float32)
