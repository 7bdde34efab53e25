"""The bundled sample project loads cleanly, and its questions and demo queries say what they claim."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from obsmem import Obsmem
from obsmem.dates import parse_window
from obsmem.projects import ProjectRegistry
from obsmem.sample import (
    SAMPLE_PROJECT,
    demo_queries,
    events_by_session,
    load_sample,
    observations,
    questions,
)

HEX64 = re.compile(r"[0-9a-f]{64}")
QUESTION_KEYS = {"case", "label", "split", "kind", "target_id", "session", "question", "relevance_topic"}
OPTIONAL_QUESTION_KEYS = {"after", "before", "identifier"}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    data_dir = tmp_path_factory.mktemp("sample-data")
    registry = ProjectRegistry(data_dir)
    try:
        counts = load_sample(registry.get(SAMPLE_PROJECT, create=True))
    finally:
        registry.close()
    return data_dir, counts


@pytest.fixture(scope="module")
def service(loaded: tuple[Path, dict[str, int]]) -> Iterator[Obsmem]:
    """One service over the bundled sample for the whole module (not the shared empty one per test): every
    test here reads the same loaded project, and loading it once keeps the module quick."""
    with Obsmem(data_dir=loaded[0]) as service:
        yield service


def _memory_sessions(service: Obsmem) -> dict[str, tuple[str, str]]:
    """memory_id -> (session_id, stored date) for every memory in the sample project."""
    with service.database(SAMPLE_PROJECT).read() as conn:
        rows = conn.execute("SELECT memory_id, session_id, date FROM memories").fetchall()
    return {memory_id: (session_id, date) for memory_id, session_id, date in rows}


def test_load_gives_the_sample_counts(loaded: tuple[Path, dict[str, int]], service: Obsmem) -> None:
    _, counts = loaded
    assert counts["sessions"] >= 8
    assert counts["events"] >= 400
    assert counts["observations"] >= 150
    assert counts["events_added"] == counts["events"]
    assert counts["observations_added"] == counts["observations"]
    status = service.status(SAMPLE_PROJECT)
    assert (status.sessions, status.events, status.observations) == (
        counts["sessions"],
        counts["events"],
        counts["observations"],
    )


def test_loading_twice_adds_nothing(tmp_path: Path) -> None:
    registry = ProjectRegistry(tmp_path)
    try:
        db = registry.get(SAMPLE_PROJECT, create=True)
        first = load_sample(db)
        second = load_sample(db)
        with db.read() as conn:
            stored = conn.execute("SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM memories)").fetchone()
    finally:
        registry.close()
    assert second["events_added"] == 0 and second["observations_added"] == 0
    assert {k: second[k] for k in ("sessions", "events", "observations")} == {
        k: first[k] for k in ("sessions", "events", "observations")
    }
    assert tuple(stored) == (first["events"], first["observations"])


def test_events_look_like_agent_sessions() -> None:
    sessions = events_by_session()
    kinds = Counter((event["role"], event["type"]) for events in sessions.values() for event in events)
    assert {role for role, _ in kinds} == {"user", "assistant", "tool", "system"}
    assert {kind for _, kind in kinds} == {"message", "tool_call", "tool_result"}
    starts: list[datetime] = []
    for session_id, events in sessions.items():
        assert [event["seq"] for event in events] == list(range(1, len(events) + 1)), session_id
        stamps = [datetime.fromisoformat(event["created_at"].replace("Z", "+00:00")) for event in events]
        assert stamps == sorted(stamps), f"{session_id}: events out of time order"
        starts.append(stamps[0])
        pending: list[str] = []
        for event in events:
            if event["type"] == "tool_call":
                assert event["role"] == "assistant" and event["tool_name"]
                assert isinstance(event["tool_args"], dict)
                pending.append(event["tool_call_id"])
            elif event["type"] == "tool_result":
                assert event["role"] == "tool" and event["content"]
                assert pending and event["tool_call_id"] == pending.pop(0), f"{session_id}#{event['seq']}"
        assert not pending, f"{session_id}: tool calls without results"
    assert max(starts) - min(starts) >= timedelta(weeks=4), "sessions should span several weeks"
    assert len(set(sessions)) == len(sessions)


def test_observations_are_one_dated_line_citing_their_session() -> None:
    sessions = events_by_session()
    days = {sid: {event["created_at"][:10] for event in events} for sid, events in sessions.items()}
    items = observations()
    assert len({(o["session_id"], o["content"]) for o in items}) == len(items), "duplicate observations"
    for item in items:
        assert "\n" not in item["content"] and item["content"].strip() == item["content"]
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}", item["timestamp"])
        assert item["timestamp"][:10] in days[item["session_id"]]
        assert item["importance"] in {"low", "medium", "high", "critical"}
        assert item["source_refs"], "an observation must cite its events"
        for ref in item["source_refs"]:
            assert 1 <= ref["seq"] <= len(sessions[ref["session_id"]])
    assert set(Counter(o["importance"] for o in items)) == {"low", "medium", "high", "critical"}


def test_questions_are_well_formed(service: Obsmem) -> None:
    known = _memory_sessions(service)
    cases = questions()
    assert len(cases) >= 50
    assert [case["case"] for case in cases] == [f"q{n:02d}" for n in range(1, len(cases) + 1)]
    for case in cases:
        assert QUESTION_KEYS <= set(case) <= QUESTION_KEYS | OPTIONAL_QUESTION_KEYS, case["case"]
        assert case["label"] in {"positive", "negative"}
        assert case["split"] in {"calibration", "held_out"}
        assert case["kind"] in {"identifier", "paraphrase", "date"}
        assert case["question"].strip() and case["relevance_topic"].strip()
        if case["label"] == "positive":
            assert HEX64.fullmatch(case["target_id"]), case["case"]
            assert case["target_id"] in known, f"{case['case']}: target is not a sample memory"
            assert known[case["target_id"]][0] == case["session"], f"{case['case']}: wrong session"
        else:
            assert case["target_id"] is None and case["session"] is None
        if case["kind"] == "identifier":
            assert case["identifier"] in case["question"]
        if case["kind"] == "date":
            assert "after" in case or "before" in case
            window = parse_window(case.get("after"), case.get("before"))
            if case["label"] == "positive":
                assert window.contains(known[case["target_id"]][1]), f"{case['case']}: target outside dates"
    labels = Counter(case["label"] for case in cases)
    assert labels["negative"] >= 10
    for split in ("calibration", "held_out"):
        in_split = [case for case in cases if case["split"] == split]
        positive_kinds = {c["kind"] for c in in_split if c["label"] == "positive"}
        assert positive_kinds == {"identifier", "paraphrase", "date"}
        assert any(c["label"] == "negative" for c in in_split)


def test_identifier_questions_are_answered_by_exact_search(service: Obsmem) -> None:
    for case in questions():
        if case["kind"] != "identifier":
            continue
        result = service.search(SAMPLE_PROJECT, case["identifier"], limit=50)
        found = {hit.memory_id for hit in result.hits}
        if case["label"] == "positive":
            assert case["target_id"] in found, f"{case['case']}: exact search misses its target"
        else:
            assert not found, f"{case['case']}: a negative identifier occurs in memory"


def test_date_negatives_have_no_memories_in_their_window(service: Obsmem) -> None:
    dates = [date for _, date in _memory_sessions(service).values()]
    for case in questions():
        if case["label"] == "negative" and case["kind"] == "date":
            window = parse_window(case.get("after"), case.get("before"))
            assert not any(window.contains(date) for date in dates), case["case"]


def test_demo_queries_show_hits_misses_and_recall(service: Obsmem) -> None:
    queries = demo_queries()
    assert 5 <= len(queries) <= 8
    with_hits = 0
    without_hits = 0
    for query in queries:
        assert {"query", "why"} <= set(query) <= {"query", "why", "after", "before"}
        result = service.search(SAMPLE_PROJECT, query["query"], after=query.get("after"), before=query.get("before"))
        body = result.to_dict()
        assert set(body) == {"mode", "hits", "truncated", "partial"} and body["mode"] == "exact"
        for hit in body["hits"]:
            assert {"id", "memory_id", "kind", "session_id", "date", "importance", "content"} <= set(hit)
            assert query["query"].lower() in hit["content"].lower()
        if not result.hits:
            without_hits += 1
            continue
        with_hits += 1
        first = result.hits[0]
        recalled = service.recall(SAMPLE_PROJECT, first.id, session_id=first.session_id)
        assert recalled.memory.memory_id == first.memory_id
        assert recalled.sources, "an observation recalls its source events"
    assert with_hits >= 2 and without_hits >= 1
    assert any("after" in query or "before" in query for query in queries)
    assert any(" " in query["query"] for query in queries), "a phrase query"


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def test_sample_text_stays_fictional_and_portable() -> None:
    documents: list[Any] = [*events_by_session().values(), observations(), questions(), demo_queries()]
    text = "\n".join(string for document in documents for string in _strings(document))
    assert "/work/" not in text
    # Mail addresses and links point only at reserved or invented hosts.
    for domain in re.findall(r"\b[\w.+-]+@([a-z][\w-]*(?:\.[a-z][\w-]*)+)", text):
        assert domain.rsplit(".", 1)[-1] in {"test", "example", "internal"}, domain
    for url in re.findall(r"https?://[^\s\"'`]+", text):
        assert re.match(r"https?://(test\b|[\w.-]+\.example\b)", url), url
    # Nothing shaped like a real credential.
    assert not re.search(r"\b(sk-[A-Za-z0-9]{16,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{20,})", text)
