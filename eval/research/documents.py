"""Documents with their conversational context, the unit both retrieval legs index.

A memory in a conversation rarely stands alone: an answer ("I'm a shooting guard for the team") carries
the words of the question before it ("What position are you playing?") only by position. A
:class:`ContextDocument` therefore keeps, beside its own text, the text of its neighbours in the same
session and its date rendered as words, so BM25 can match a question against all of them with separate
column weights and the vector leg can embed a contextual view.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime

COLUMNS: tuple[str, ...] = ("body", "previous", "next", "date")
# About two sentences of each neighbour: all of a typical chat turn (LoCoMo's average is ~140
# characters), while a long neighbour (an assistant's essay) cannot swamp a short memory's length
# normalisation. Chosen by that reasoning, not by score: 200-400 measured the same on LoCoMo.
CONTEXT_CHARS = 300


@dataclass(frozen=True)
class Item:
    """One memory in order: a key to report, the session it belongs to, its text and date."""

    key: str
    session: Hashable
    text: str
    when: datetime | None


@dataclass(frozen=True)
class ContextDocument:
    key: str
    session: Hashable
    body: str
    previous: str
    next: str
    date: str

    def columns(self) -> tuple[str, str, str, str]:
        return (self.body, self.previous, self.next, self.date)

    def view(self, name: str) -> str:
        """Texts for the embedding model: ``body``, or ``window`` (previous, body and next, one per line)."""
        if name == "body":
            return self.body
        if name == "window":
            return "\n".join(part for part in (self.previous, self.body, self.next) if part)
        raise ValueError(f"unknown view {name!r}")


def date_words(when: datetime | None) -> str:
    """``8 May 2023``: day, month name and year as separate words a question can match in any order."""
    if when is None:
        return ""
    return f"{when.day} {when:%B} {when.year}"


def tail(text: str, limit: int | None) -> str:
    """The last ``limit`` characters, cut at a word boundary (what a reply answers is said last)."""
    if limit is None or len(text) <= limit:
        return text
    cut = text[-limit:]
    space = cut.find(" ")
    return cut[space + 1 :] if 0 <= space < len(cut) - 1 else cut


def head(text: str, limit: int | None) -> str:
    """The first ``limit`` characters, cut at a word boundary."""
    if limit is None or len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    return cut[:space] if space > 0 else cut


def contextual_documents(items: Sequence[Item], context_chars: int | None = CONTEXT_CHARS) -> list[ContextDocument]:
    """Attach each item's neighbours within its session (items must be in conversation order).

    ``context_chars`` bounds the neighbour text kept (the end of the previous item, the start of the
    next), so a long neighbour cannot swamp a short memory's BM25 length normalisation.
    """
    documents = []
    for position, item in enumerate(items):
        before = items[position - 1] if position > 0 else None
        after = items[position + 1] if position + 1 < len(items) else None
        same_before = before is not None and before.session == item.session
        same_after = after is not None and after.session == item.session
        previous = tail(before.text, context_chars) if before is not None and same_before else ""
        following = head(after.text, context_chars) if after is not None and same_after else ""
        documents.append(ContextDocument(item.key, item.session, item.text, previous, following, date_words(item.when)))
    return documents
