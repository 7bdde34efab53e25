"""Turn the eval datasets into corpora for :class:`~obsmem.eval.research.hybrid.CorpusIndex`.

A corpus is a list of :class:`Item` in conversation order plus, for each item key, the ids the metric
counts (dialogue turns for LoCoMo, sessions for LongMemEval).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from obsmem.eval.datasets.locomo import Conversation
from obsmem.eval.datasets.longmemeval import LongMemEvalData
from obsmem.eval.research.documents import Item

CHUNK_CHARS = 1200  # the product's default chunk size, so long chat turns are split as it would


@dataclass(frozen=True)
class Corpus:
    name: str
    items: list[Item]
    cites: Mapping[str, tuple[str, ...]]


def locomo_turns(conversation: Conversation) -> Corpus:
    """Way (a): each turn is a document citing itself."""
    items = [Item(t.dia_id, t.session, t.document, t.when) for t in conversation.turns()]
    return Corpus(conversation.sample_id, items, {t.dia_id: (t.dia_id,) for t in conversation.turns()})


def locomo_facts(conversation: Conversation) -> Corpus:
    """Way (b): each of the dataset's facts is a document citing the turns it came from."""
    dates = {s.number: s.when for s in conversation.sessions}
    items, cites = [], {}
    for position, fact in enumerate(conversation.facts):
        key = f"F{position}"
        items.append(Item(key, fact.session, fact.text, dates.get(fact.session)))
        cites[key] = fact.sources
    return Corpus(conversation.sample_id, items, cites)


def chunks(text: str, size: int = CHUNK_CHARS) -> list[str]:
    """Split at whitespace into pieces of at most ``size`` characters (a longer word is cut)."""
    out: list[str] = []
    current = ""
    for word in text.split():
        while len(word) > size:
            if current:
                out.append(current)
                current = ""
            out.append(word[:size])
            word = word[size:]
        candidate = f"{current} {word}" if current else word
        if len(candidate) > size:
            out.append(current)
            current = word
        else:
            current = candidate
    if current:
        out.append(current)
    return out or [""]


def longmemeval_pool(data: LongMemEvalData, session_ids: tuple[str, ...] | None = None) -> Corpus:
    """Every turn of the given sessions (all when None), chunked, each chunk citing its session."""
    items, cites = [], {}
    for session_id in session_ids or tuple(data.sessions):
        session = data.sessions[session_id]
        for turn_number, turn in enumerate(session.turns):
            for part_number, part in enumerate(chunks(turn.content)):
                key = f"{session_id}#{turn_number}#{part_number}"
                items.append(Item(key, session_id, f"{turn.role}: {part}", session.when))
                cites[key] = (session_id,)
    return Corpus("longmemeval", items, cites)
