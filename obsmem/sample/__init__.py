"""The bundled sample project: a realistic, fictional record of coding-agent work.

Ten sessions of an agent working on "ledgerkite", an invented subscription-billing service (Python API,
``lk`` command-line tool, TypeScript dashboard), spread over six weeks of March and April 2025: a flaky
test, an online migration, a latency regression, a webhook signature bug, a refactor, a dependency
upgrade, a release, an incident, a follow-up migration and an export timeout. Some threads cross
sessions (a preference stated once, a decision revisited weeks later).

The data files in ``data/``:

- ``events.jsonl`` — one conversation event per line: ``session_id``, ``seq``, ``role``, ``type``,
  ``content``, optional ``tool_name`` / ``tool_args`` / ``tool_call_id``, ``created_at`` (ISO 8601 UTC).
- ``observations.jsonl`` — what an observer wrote about them: ``session_id``, ``content`` (one line),
  ``timestamp`` (``YYYY-MM-DD HH:MM``), ``importance``, ``source_refs`` (``[{session_id, seq}]``).
- ``questions.jsonl`` — labelled questions for evaluating search: ``case``, ``label``
  (``positive``/``negative``), ``split`` (``calibration``/``held_out``), ``kind`` (``identifier``: an
  exact identifier answers it; ``paraphrase``: it shares few words with its answer; ``date``: it is
  bounded by ``after``/``before``), ``target_id`` (full memory id, null for negatives), ``session``,
  ``question``, ``relevance_topic``, and for identifier questions the ``identifier`` an exact search
  should use.
- ``demo_queries.json`` — the showcase searches the ``demo`` command runs.

Everything in it was written for this project; names, hosts, tickets and hashes are invented.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

from obsmem.events import append_events
from obsmem.memories import add_observations
from obsmem.storage import ProjectDatabase

DATA_DIR = Path(__file__).resolve().parent / "data"
SAMPLE_PROJECT = "sample"
# Events are appended per session in batches this size: small enough to show batching, large enough
# that loading stays a handful of transactions.
EVENT_BATCH = 200

__all__ = [
    "DATA_DIR",
    "SAMPLE_PROJECT",
    "SampleDataError",
    "demo_queries",
    "events_by_session",
    "load_sample",
    "observations",
    "questions",
]


class SampleDataError(RuntimeError):
    """The bundled sample data did not load cleanly: a packaging bug, never a user error."""


def _read_jsonl(name: str) -> Iterator[dict[str, Any]]:
    with (DATA_DIR / name).open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


@cache
def _events() -> tuple[tuple[str, tuple[dict[str, Any], ...]], ...]:
    sessions: dict[str, list[dict[str, Any]]] = {}
    for event in _read_jsonl("events.jsonl"):
        sessions.setdefault(event["session_id"], []).append(event)
    return tuple((sid, tuple(events)) for sid, events in sessions.items())


def events_by_session() -> dict[str, list[dict[str, Any]]]:
    """Every sample event, grouped by session in file order (sessions oldest first, events by seq)."""
    return {sid: [dict(event) for event in events] for sid, events in _events()}


def observations() -> list[dict[str, Any]]:
    """Every sample observation, in the shape ``add_observations`` accepts."""
    return list(_read_jsonl("observations.jsonl"))


def questions() -> list[dict[str, Any]]:
    """The labelled questions (see the module docstring for their fields)."""
    return list(_read_jsonl("questions.jsonl"))


def demo_queries() -> list[dict[str, Any]]:
    """Showcase searches: ``{"query", "after"?, "before"?, "why"}`` each."""
    with (DATA_DIR / "demo_queries.json").open(encoding="utf-8") as handle:
        return list(json.load(handle))


def load_sample(db: ProjectDatabase) -> dict[str, int]:
    """Load the sample sessions and observations into ``db``; safe to repeat.

    Events are appended per session in batches; observations are written in one batch. Both writes are
    idempotent, so a second load adds nothing. Returns the sample's totals (``sessions``, ``events``,
    ``observations``) and what this call added (``events_added``, ``observations_added``). Raises
    :class:`SampleDataError` if any observation is rejected.
    """
    sessions = events_by_session()
    events_total = events_added = 0
    for session_id, events in sessions.items():
        for start in range(0, len(events), EVENT_BATCH):
            batch = [
                {key: value for key, value in event.items() if key != "session_id"}
                for event in events[start : start + EVENT_BATCH]
            ]
            receipt = append_events(db, session_id, batch)
            events_total += len(batch)
            events_added += receipt.appended
    items = observations()
    written = add_observations(db, items)
    if written.rejected:
        first = written.rejected[0]
        raise SampleDataError(
            f"{len(written.rejected)} sample observation(s) rejected; first: index {first.index},"
            f" {first.code}: {first.message}"
        )
    return {
        "sessions": len(sessions),
        "events": events_total,
        "observations": len(items),
        "events_added": events_added,
        "observations_added": len(written.added),
    }
