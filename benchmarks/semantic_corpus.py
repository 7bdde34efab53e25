"""Real text for the semantic benchmarks: one-line memories built from LoCoMo and LongMemEval turns.

The shared evaluation data is read by path (``--shared-data``, default ``../shared/data`` beside the
repository); nothing is copied into the repository. Sentences of real conversation turns form a pool;
memory ``i`` is pool sentence ``i`` (and, once the pool is used up, joined with a second one), so every
memory is distinct, real English, and observation-sized.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

DEFAULT_SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def sentence_pool(shared: Path = DEFAULT_SHARED) -> list[str]:
    texts: list[str] = []
    for sample in json.loads((shared / "locomo" / "locomo-dev5.json").read_text()):
        for key, value in sample["conversation"].items():
            if key.startswith("session_") and isinstance(value, list):
                texts.extend(turn["text"] for turn in value)
        for session in sample["observation"].values():
            for facts in session.values():
                texts.extend(fact[0] for fact in facts if isinstance(fact, list) and fact)
    with (shared / "longmemeval-s-subset16" / "sessions.jsonl").open() as handle:
        for line in handle:
            texts.extend(turn["content"] for turn in json.loads(line)["turns"])
    pool: list[str] = []
    seen: set[str] = set()
    for text in texts:
        for sentence in _SENTENCE.split(" ".join(text.split())):
            sentence = sentence.strip(" -*#")
            if 30 <= len(sentence) <= 300 and sentence not in seen:
                seen.add(sentence)
                pool.append(sentence)
    return pool


def memories(count: int, pool: list[str]) -> list[str]:
    size = len(pool)
    out = []
    for i in range(count):
        text = pool[i % size]
        if i >= size:
            text = f"{text} {pool[(i * 7919 + i // size) % size]}"
        out.append(text[:1000])
    return out


def timestamp(i: int, count: int) -> str:
    """Spread memories over two years, in order."""
    minutes = int(i * (2 * 365 * 24 * 60) / max(count, 1))
    day, minute = divmod(minutes, 24 * 60)
    year = 2023 + day // 365
    day_of_year = day % 365
    month = min(12, day_of_year // 30 + 1)
    dom = min(28, day_of_year - (month - 1) * 30 + 1)
    return f"{year}-{month:02d}-{dom:02d} {minute // 60:02d}:{minute % 60:02d}"


def ingest(service: Any, project: str, texts: list[str], *, offset: int = 0, total: int | None = None) -> float:
    """Add ``texts`` as observations in sessions of 1000; returns seconds taken."""
    total = total or len(texts)
    started = time.perf_counter()
    for start in range(0, len(texts), 1000):
        part = texts[start : start + 1000]
        session = f"s{(offset + start) // 1000}"
        receipt = service.append_events(project, session, [{"role": "user", "content": "e"} for _ in part])
        first = receipt.last_seq - len(part) + 1
        written = service.add_observations(
            project,
            [
                {
                    "session_id": session,
                    "content": text,
                    "timestamp": timestamp(offset + start + i, total),
                    "source_refs": [first + i],
                }
                for i, text in enumerate(part)
            ],
        )
        assert not written.rejected, written.rejected[:3]
    return time.perf_counter() - started
