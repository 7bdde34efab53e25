"""LongMemEval (Wu et al., 2024): questions over a haystack of chat sessions, judged per session.

Two layouts are read into the same records:

- the **official** file: a JSON list of questions ``{question_id, question_type, question, answer,
  question_date, haystack_session_ids, haystack_dates, haystack_sessions, answer_session_ids}``, each with
  its own haystack (sessions are lists of ``{role, content, has_answer?}``);
- the **subset** directory: ``sessions.jsonl`` (``{id, timestamp, turns: [{role, content, ...}]}``, one
  pool shared by all questions) and ``questions.jsonl`` (``{id, category, question, ground_truth:
  {answer, supporting_session_ids, ...}, constraints: {abstention_expected}}``).

Abstention questions (official ids ending in ``_abs``, or ``abstention_expected``) are kept but flagged:
the official retrieval metrics exclude them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

_DATE_FORMAT = "%Y/%m/%d (%a) %H:%M"


class LongMemEvalFormatError(ValueError):
    """The LongMemEval data does not have a known shape."""


@dataclass(frozen=True)
class ChatTurn:
    role: str
    content: str


@dataclass(frozen=True)
class ChatSession:
    id: str
    when: datetime | None
    turns: tuple[ChatTurn, ...]


@dataclass(frozen=True)
class LongMemEvalQuestion:
    id: str
    category: str
    text: str
    answer: str
    answer_sessions: tuple[str, ...]
    haystack: tuple[str, ...]
    abstention: bool
    asked: datetime | None = None


@dataclass(frozen=True)
class LongMemEvalData:
    questions: tuple[LongMemEvalQuestion, ...]
    sessions: Mapping[str, ChatSession]


def parse_date(text: object) -> datetime | None:
    """``"2023/05/20 (Sat) 02:21"`` -> a datetime; anything else -> None (dates are informative only)."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.strptime(text.strip(), _DATE_FORMAT)
    except ValueError:
        return None


def _turns(raw: list[Mapping[str, Any]]) -> tuple[ChatTurn, ...]:
    return tuple(ChatTurn(str(t.get("role", "")), str(t.get("content") or "")) for t in raw)


def load_official(path: str | Path) -> LongMemEvalData:
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    if not isinstance(data, list):
        raise LongMemEvalFormatError("an official LongMemEval file is a JSON list of questions")
    sessions: dict[str, ChatSession] = {}
    questions = []
    for item in data:
        ids = [str(i) for i in item["haystack_session_ids"]]
        dates = item.get("haystack_dates") or [None] * len(ids)
        for session_id, date, raw in zip(ids, dates, item["haystack_sessions"], strict=True):
            sessions.setdefault(session_id, ChatSession(session_id, parse_date(date), _turns(raw)))
        question_id = str(item["question_id"])
        questions.append(
            LongMemEvalQuestion(
                id=question_id,
                category=str(item.get("question_type", "")),
                text=str(item["question"]),
                answer=str(item.get("answer", "")),
                answer_sessions=tuple(str(i) for i in item.get("answer_session_ids", [])),
                haystack=tuple(ids),
                abstention=question_id.endswith("_abs"),
                asked=parse_date(item.get("question_date")),
            )
        )
    return LongMemEvalData(tuple(questions), sessions)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def load_subset(directory: str | Path) -> LongMemEvalData:
    root = Path(directory)
    sessions = {}
    for raw in _jsonl(root / "sessions.jsonl"):
        session = ChatSession(str(raw["id"]), parse_date(raw.get("timestamp")), _turns(raw.get("turns", [])))
        sessions[session.id] = session
    pool = tuple(sessions)
    questions = []
    for raw in _jsonl(root / "questions.jsonl"):
        truth = raw.get("ground_truth", {})
        constraints = raw.get("constraints", {})
        questions.append(
            LongMemEvalQuestion(
                id=str(raw["id"]),
                category=str(raw.get("category", "")),
                text=str(raw["question"]),
                answer=str(truth.get("answer", "")),
                answer_sessions=tuple(str(i) for i in truth.get("supporting_session_ids", [])),
                haystack=pool,
                abstention=bool(constraints.get("abstention_expected", False)),
                asked=parse_date(truth.get("valid_as_of")),
            )
        )
    return LongMemEvalData(tuple(questions), sessions)


def load_longmemeval(path: str | Path) -> LongMemEvalData:
    """A directory is the subset layout; a file is the official layout."""
    target = Path(path)
    return load_subset(target) if target.is_dir() else load_official(target)
