"""Named labelled-question sets: a memory store (events and observations) and questions about it.

``obsmem eval questions --set NAME`` loads the set into a fresh project and runs its questions. Four sets ship:

- ``sample`` (the default): the bundled sample project (:mod:`obsmem.sample`), one invented billing
  service over six weeks, 64 questions.
- ``coding``: seven invented software projects a coding agent worked on over seven months of 2025 (a
  Django storefront, a Rust static-site generator, a dbt/Airflow analytics pipeline, thermostat
  firmware, a Go registry-mirroring operator, a React Native field app and a Node.js API gateway), 410
  observations in the Observer's style and 308 labelled questions. All seven live in one memory store,
  as they would for an agent that works across repositories, so every question competes with the other
  projects' memories. Written for evaluation; every name, host, ticket and figure is invented.
- ``coding-holdout``: four more invented projects in the same layout (a Kotlin field-service Android app,
  a Terraform/AWS infrastructure repository, an Elixir chat service and a C++ audio plug-in), 168
  observations and 128 questions, written after the search recipe's constants were chosen and by a writer
  who saw neither the search code nor any result. Every question is ``held_out``: the set only measures,
  it is never calibrated on.
- ``coding-calibration``: four more (a Kotlin event check-in app, a Rust chart-tile server, a Rails booking
  app for vet clinics, Zephyr firmware for a soil sensor), 177 observations and 120 questions, 40 of them
  about the current state of a decision changed two or three times, written later the same way. Every
  question is ``calibration``: the set is for choosing rules on, never for reporting them.

Both sets share one file layout (``events.jsonl``, ``observations.jsonl``, ``questions.jsonl``; see
:mod:`obsmem.sample` for the fields). The coding set adds:

- on an observation, ``ref`` (``<project>/<name>``): a stable name the questions cite. It is not part of
  the memory; the loader drops it before writing.
- on a question, ``project`` (which invented project it is about), ``targets`` (the ``ref`` of each
  target), and for an answer that spans several memories ``target_ids`` (their memory ids) with
  ``match``: ``all`` (the question is answered when every target is among the first k) or ``any``.
- ``kind``: ``identifier`` (an exact identifier answers it; ``identifier`` holds it), ``paraphrase``
  (asked in other words than its target), ``date`` (bounded by ``after``/``before``; a similar memory
  outside the window would be wrong), ``current`` (the latest of several decisions about one thing; the
  target is the latest), ``multi`` (several memories together answer it) and ``negative`` (plausible,
  but nothing in the store answers it).
- ``split``: whole projects are held out (``held_out``: harbor, pinecrest, orbit), so nothing about a
  held-out project is seen while calibrating on the others.

Events are a condensed transcript: each session holds the user's opening request and one assistant turn
per observation carrying the facts it records, which the observation cites.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any

from obsmem.errors import ValidationFailed
from obsmem.events import append_events
from obsmem.memories import ObservationIn, add_observations
from obsmem.storage import ProjectDatabase

CODING_DIR = Path(__file__).resolve().parent / "coding"
CODING_HOLDOUT_DIR = Path(__file__).resolve().parent / "coding_holdout"
CODING_CALIBRATION_DIR = Path(__file__).resolve().parent / "coding_calibration"
# Events are appended per session in batches this size (one transaction each).
EVENT_BATCH = 200
# Keys of a data file's observation that are the set's own bookkeeping, not part of the memory.
SET_ONLY_KEYS = frozenset({"ref"})

# Words that say nothing about a topic, left out of the word overlap (English function and question words).
_FUNCTION_WORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing done down during each few for from further had has
    have having he her here hers him his how i if in into is it its just me more most my no nor not now
    of off on once only or other our ours out over own same she should so some such than that the their
    them then there these they this those through to too under until up very was we were what when
    where which while who whom why will with would you your s t ll ve re d m
    """.split()  # noqa: SIM905 (a word list reads better as text)
)
_WORD = re.compile(r"[a-z0-9]+")
_SUFFIXES = ("ing", "ed", "es", "s")


class QuestionSetError(RuntimeError):
    """A shipped question set did not load cleanly: a packaging bug, never a user error."""


@dataclass(frozen=True)
class QuestionSet:
    """A named set: where its files are, which project it loads into, what it is (``description``, for the
    run's notes) and the dataset name its results carry."""

    name: str
    project: str
    description: str
    data_dir: Path
    dataset: str

    def _rows(self, name: str) -> Iterator[dict[str, Any]]:
        with (self.data_dir / name).open(encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    yield json.loads(line)

    def events_by_session(self) -> dict[str, list[dict[str, Any]]]:
        """Every event, grouped by session in file order."""
        sessions: dict[str, list[dict[str, Any]]] = {}
        for event in self._rows("events.jsonl"):
            sessions.setdefault(event["session_id"], []).append(event)
        return sessions

    def observations(self) -> list[dict[str, Any]]:
        """Every observation as the data file holds it (with the set's own keys such as ``ref``)."""
        return list(self._rows("observations.jsonl"))

    def questions(self) -> list[dict[str, Any]]:
        """The labelled questions, as the data file holds them."""
        return list(self._rows("questions.jsonl"))

    def memory_texts(self) -> dict[str, str]:
        """memory id -> content of every observation, the ids computed as the write path computes them."""
        texts = {}
        for item in self.observations():
            parsed = ObservationIn.model_validate(memory_fields(item))
            texts[parsed.memory_id()] = parsed.content
        return texts

    def overlap_note(self) -> str:
        """The word overlap of each kind with its targets, as one line for a run's notes."""
        overlap = overlap_by_kind(self.questions(), self.memory_texts())
        return "word overlap with targets: " + ", ".join(f"{kind} {value:.3f}" for kind, value in overlap.items())

    def load(self, db: ProjectDatabase) -> dict[str, int]:
        """Write the set's events and observations into ``db``; safe to repeat (both writes are idempotent)."""
        if self.name == "sample":
            from obsmem.sample import load_sample

            return load_sample(db)
        sessions = self.events_by_session()
        events = 0
        for session_id, session_events in sessions.items():
            for start in range(0, len(session_events), EVENT_BATCH):
                batch = [
                    {key: value for key, value in event.items() if key != "session_id"}
                    for event in session_events[start : start + EVENT_BATCH]
                ]
                append_events(db, session_id, batch)
                events += len(batch)
        items = [memory_fields(item) for item in self.observations()]
        written = add_observations(db, items)
        if written.rejected:
            first = written.rejected[0]
            raise QuestionSetError(
                f"set {self.name}: {len(written.rejected)} observation(s) rejected; first: index {first.index},"
                f" {first.code}: {first.message}"
            )
        return {"sessions": len(sessions), "events": events, "observations": len(items)}


def memory_fields(item: Mapping[str, Any]) -> dict[str, Any]:
    """An observation of a data file without the set's own keys: what ``add_observations`` accepts."""
    return {key: value for key, value in item.items() if key not in SET_ONLY_KEYS}


def _sample() -> QuestionSet:
    from obsmem.sample import DATA_DIR, SAMPLE_PROJECT

    # The sample's results keep the dataset name they had before there were several sets.
    return QuestionSet("sample", SAMPLE_PROJECT, "the bundled sample", DATA_DIR, "labelled questions")


_SETS: dict[str, Callable[[], QuestionSet]] = {
    "sample": _sample,
    "coding": lambda: QuestionSet(
        "coding",
        "coding",
        "the coding set (seven coding-agent projects over seven months, one memory store)",
        CODING_DIR,
        "coding set",
    ),
    "coding-holdout": lambda: QuestionSet(
        "coding-holdout",
        "coding-holdout",
        "the coding hold-out set (four more coding-agent projects, every question held out)",
        CODING_HOLDOUT_DIR,
        "coding hold-out set",
    ),
    "coding-calibration": lambda: QuestionSet(
        "coding-calibration",
        "coding-calibration",
        "the coding calibration set (four more coding-agent projects, every question for calibration)",
        CODING_CALIBRATION_DIR,
        "coding calibration set",
    ),
}
SET_NAMES: tuple[str, ...] = tuple(_SETS)
DEFAULT_SET = "sample"


def question_set(name: str) -> QuestionSet:
    """The shipped set called ``name``; an unknown name is a ``validation_failed`` naming the choices."""
    factory = _SETS.get(name)
    if factory is None:
        raise ValidationFailed(f"no question set {name!r}; the sets are: {', '.join(SET_NAMES)}", field="set")
    return factory()


# -- word overlap ----------------------------------------------------------------------------------------


def content_words(text: str) -> set[str]:
    """Lowercased words without function words, each with one plural or tense suffix cut (``caching`` ->
    ``cach``, ``caches`` -> ``cach``): a rough stem, so a question does not look novel for saying
    "rebuilds" where its target says "rebuild"."""
    words = set()
    for word in _WORD.findall(text.lower()):
        if word in _FUNCTION_WORDS:
            continue
        for suffix in _SUFFIXES:
            if word.endswith(suffix) and len(word) - len(suffix) >= 3:
                word = word[: -len(suffix)]
                break
        words.add(word)
    return words


def word_overlap(question: str, targets: Iterable[str]) -> float:
    """The share of the question's content words that occur in its target memories (0 to 1)."""
    asked = content_words(question)
    if not asked:
        return 0.0
    found = set().union(*(content_words(text) for text in targets))
    return len(asked & found) / len(asked)


def overlap_by_kind(questions: Sequence[Mapping[str, Any]], memory_text: Mapping[str, str]) -> dict[str, float]:
    """Mean word overlap of the positive questions of each kind with their targets (``memory_text``: id ->
    content), and over all positives as ``overall``."""
    found: dict[str, list[float]] = defaultdict(list)
    for question in questions:
        if question.get("label") != "positive":
            continue
        ids = question.get("target_ids") or [question["target_id"]]
        value = word_overlap(question["question"], (memory_text[memory_id] for memory_id in ids))
        found[str(question.get("kind", "question"))].append(value)
        found["overall"].append(value)
    return {kind: round(fmean(values), 3) for kind, values in sorted(found.items())}
