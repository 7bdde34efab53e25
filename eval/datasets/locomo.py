"""LoCoMo (Maharana et al., 2024): long multi-session conversations with evidence-labelled questions.

The file is a JSON list of samples ``{sample_id, conversation, qa, observation, ...}``. Each sample is one
conversation and is evaluated against its own memory only. This module turns a sample into plain typed
records and offers the two ways of storing it as memories:

- :func:`turn_observations` — every dialogue turn is an observation citing itself (text
  ``"<speaker>: <text>"`` plus the shared image's caption, dated with its session's date);
- :func:`fact_observations` — the dataset's own per-session facts are observations citing the turns they
  were extracted from (the observational-memory path).

Both cite turns as source refs ``(session_id, seq)``: session ``N`` of the conversation is the session
``session-N`` and a turn's seq is its 1-based position in the session, which is what its id ``DN:seq``
says. Retrieved memories map back to dialogue ids through :func:`dia_id`.

Evidence ids in the questions are sometimes malformed (``"D8:6; D9:17"``, ``"D:11:26"``, ids that do not
exist); :func:`clean_evidence` applies the documented cleaning and questions left without evidence are
dropped by :func:`load_locomo`, so every metric averages over the same questions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

CATEGORIES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}

_DIA_ID = re.compile(r"D(\d+):(\d+)")
_EVIDENCE_SEPARATORS = re.compile(r"[;,\s]+")
_SESSION_KEY = re.compile(r"session_(\d+)")
_SESSION_DATE = re.compile(r"\s*(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*", re.I)
_MONTHS = {
    name: number
    for number, name in enumerate(
        (
            "january",
            "february",
            "march",
            "april",
            "may",
            "june",
            "july",
            "august",
            "september",
            "october",
            "november",
            "december",
        ),
        start=1,
    )
}


class LocomoFormatError(ValueError):
    """The LoCoMo file does not have the documented shape."""


@dataclass(frozen=True)
class Turn:
    """One dialogue turn."""

    dia_id: str
    session: int
    seq: int
    speaker: str
    text: str
    caption: str | None
    when: datetime

    @property
    def document(self) -> str:
        """The turn as stored text: ``"<speaker>: <text>"`` plus the image caption when there is one."""
        body = f"{self.speaker}: {self.text}"
        if self.caption:
            body += f" [shared an image: {self.caption}]"
        return body

    @property
    def session_id(self) -> str:
        return session_name(self.session)

    @property
    def timestamp(self) -> str:
        """``YYYY-MM-DD HH:MM``, the session's date."""
        return self.when.strftime("%Y-%m-%d %H:%M")


@dataclass(frozen=True)
class Session:
    number: int
    when: datetime
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Question:
    """A question with its cleaned evidence (never empty)."""

    index: int
    text: str
    answer: str
    category: int
    evidence: tuple[str, ...]

    @property
    def category_name(self) -> str:
        return CATEGORIES.get(self.category, str(self.category))


@dataclass(frozen=True)
class Fact:
    """One of the dataset's per-session observations, with the turns it came from."""

    session: int
    speaker: str
    text: str
    sources: tuple[str, ...]


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    speakers: tuple[str, str]
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]
    facts: tuple[Fact, ...]
    skipped_questions: int = 0

    def turns(self) -> Iterator[Turn]:
        for session in self.sessions:
            yield from session.turns

    def turn_index(self) -> dict[str, Turn]:
        return {turn.dia_id: turn for turn in self.turns()}


@dataclass(frozen=True)
class ObservationSpec:
    """A memory to store for the eval: one line of text, its date and the turns it cites."""

    session_id: str
    timestamp: str
    content: str
    cites: tuple[str, ...]

    def source_refs(self) -> list[dict[str, Any]]:
        return [{"session_id": session_name(s), "seq": q} for s, q in (split_dia_id(c) for c in self.cites)]


def session_name(number: int) -> str:
    return f"session-{number}"


def split_dia_id(value: str) -> tuple[int, int]:
    match = _DIA_ID.fullmatch(value)
    if match is None:
        raise ValueError("not a dialogue id of the form D<session>:<turn>")
    return int(match.group(1)), int(match.group(2))


def dia_id(session_id: str, seq: int) -> str:
    """The dialogue id of a source ref written by :func:`turn_observations` or :func:`fact_observations`."""
    prefix = "session-"
    if not session_id.startswith(prefix) or not session_id[len(prefix) :].isdigit():
        raise ValueError("not a LoCoMo session id")
    return f"D{int(session_id[len(prefix) :])}:{seq}"


def clean_evidence(raw: Iterable[object], known: Mapping[str, object] | set[str]) -> tuple[str, ...]:
    """Split on ``[;,\\s]+``, keep well-formed ids that exist, first occurrence order, no duplicates."""
    kept: list[str] = []
    for item in raw:
        if not isinstance(item, str):
            continue
        for part in _EVIDENCE_SEPARATORS.split(item):
            if _DIA_ID.fullmatch(part) and part in known and part not in kept:
                kept.append(part)
    return tuple(kept)


def parse_session_date(text: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` -> a datetime."""
    match = _SESSION_DATE.fullmatch(text)
    if match is None:
        raise LocomoFormatError("session date is not of the form 'H:MM am on D Month, YYYY'")
    hour, minute, half, day, month_name, year = match.groups()
    month = _MONTHS.get(month_name.lower())
    if month is None:
        raise LocomoFormatError("session date has an unknown month name")
    hour_24 = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
    return datetime(int(year), month, int(day), hour_24, int(minute))


def _sessions(conversation: Mapping[str, Any]) -> tuple[Session, ...]:
    sessions = []
    for key, value in conversation.items():
        match = _SESSION_KEY.fullmatch(key)
        if match is None or not isinstance(value, list):
            continue  # date keys without a session exist in the file
        number = int(match.group(1))
        date_text = conversation.get(f"{key}_date_time")
        if not isinstance(date_text, str):
            raise LocomoFormatError("a session has no session_N_date_time")
        when = parse_session_date(date_text)
        turns = []
        for position, raw in enumerate(value, start=1):
            turn_id = raw.get("dia_id")
            if turn_id != f"D{number}:{position}":
                raise LocomoFormatError("a turn's dia_id does not match its session and position")
            caption = raw.get("blip_caption")
            turns.append(
                Turn(
                    turn_id,
                    number,
                    position,
                    str(raw["speaker"]),
                    str(raw["text"]),
                    caption if isinstance(caption, str) and caption.strip() else None,
                    when,
                )
            )
        sessions.append(Session(number, when, tuple(turns)))
    sessions.sort(key=lambda s: s.number)
    return tuple(sessions)


def _facts(observation: Mapping[str, Any], known: set[str]) -> tuple[Fact, ...]:
    facts = []
    for key, by_speaker in observation.items():
        match = re.fullmatch(r"session_(\d+)_observation", key)
        if match is None or not isinstance(by_speaker, dict):
            continue
        for speaker, items in by_speaker.items():
            for item in items:
                text, refs = item[0], item[1]
                sources = clean_evidence(refs if isinstance(refs, list) else [refs], known)
                if sources and isinstance(text, str) and text.strip():
                    facts.append(Fact(int(match.group(1)), speaker, " ".join(text.split()), sources))
    facts.sort(key=lambda f: (f.session, split_dia_id(f.sources[0])))
    return tuple(facts)


def parse_sample(sample: Mapping[str, Any]) -> Conversation:
    conversation = sample["conversation"]
    sessions = _sessions(conversation)
    known = {turn.dia_id for session in sessions for turn in session.turns}
    questions = []
    skipped = 0
    for index, qa in enumerate(sample.get("qa", [])):
        evidence = clean_evidence(qa.get("evidence", []), known)
        if not evidence:
            skipped += 1
            continue
        answer = qa.get("answer", qa.get("adversarial_answer", ""))
        questions.append(Question(index, str(qa["question"]), str(answer), int(qa["category"]), evidence))
    return Conversation(
        sample_id=str(sample["sample_id"]),
        speakers=(str(conversation["speaker_a"]), str(conversation["speaker_b"])),
        sessions=sessions,
        questions=tuple(questions),
        facts=_facts(sample.get("observation", {}), known),
        skipped_questions=skipped,
    )


def load_locomo(path: str | Path) -> list[Conversation]:
    """Read a LoCoMo JSON file (a list of samples)."""
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    if not isinstance(data, list):
        raise LocomoFormatError("a LoCoMo file is a JSON list of samples")
    return [parse_sample(sample) for sample in data]


def turn_observations(conversation: Conversation) -> list[ObservationSpec]:
    """Way (a): each turn is an observation citing itself."""
    return [ObservationSpec(t.session_id, t.timestamp, t.document, (t.dia_id,)) for t in conversation.turns()]


def fact_observations(conversation: Conversation) -> list[ObservationSpec]:
    """Way (b): the dataset's facts are observations citing their turns, dated with their session."""
    dates = {s.number: s.when.strftime("%Y-%m-%d %H:%M") for s in conversation.sessions}
    return [
        ObservationSpec(session_name(f.session), dates[f.session], f.text, f.sources)
        for f in conversation.facts
        if f.session in dates
    ]


def turns_of(ranked_citations: Sequence[Sequence[str]]) -> list[str]:
    """Ranked memories -> ranked turns: each memory's cited turns in order, first occurrence wins."""
    seen: set[str] = set()
    ranked: list[str] = []
    for cites in ranked_citations:
        for turn_id in cites:
            if turn_id not in seen:
                seen.add(turn_id)
                ranked.append(turn_id)
    return ranked
