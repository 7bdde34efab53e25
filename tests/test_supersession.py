"""``[semantic.supersession]``: for a question about the present, the latest memory about a thing ranks above
the earlier one it revised; other questions, notes of the same session and unrelated later memories keep
the fused order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from obsmem import Obsmem
from obsmem.retrieval.supersession import (
    asks_about_now,
    asks_about_the_past,
    names_replaced,
    present_supersession,
    replaced_values,
    settled_first,
    stated_supersession,
    states_change,
    states_settled,
    supersede,
)
from obsmem.settings import SupersessionSettings, load_settings
from support.hybrid_reference import reference_search
from support.model_server import ModelServer
from support.semantic_service import add_memories, semantic_settings

FIRST = "Decision: the build cache lives in the repository cache folder"
REVISED = "Decision (June): the build cache lives in the user cache folder instead, per user, supersedes the first"
ASIDE = "The release notes mention the new icon set for the docs theme"


def test_present_cues_are_whole_words() -> None:
    assert asks_about_now("Where does the build cache live now?")
    assert asks_about_now("Which broker does Celery use at the moment?")
    assert asks_about_now("What is the CURRENT api version?")
    assert not asks_about_now("Where did the build cache live in March?")
    assert not asks_about_now("Who knows the currency of the invoices?")  # 'currency' is not 'current'
    assert not asks_about_now("What did they paint in their latest project in July 2023?")  # anchored in July
    assert not asks_about_now("Which version is current as of 2024?")
    assert states_change("Port changed from 8080 to 9090 (supersedes the earlier 8080)")
    assert not states_change("The port is 8080")


def unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def test_latest_of_a_chain_ends_first_and_unrelated_memories_stay() -> None:
    ranked = [(1, 0.9), (2, 0.8), (3, 0.7), (4, 0.6), (5, 0.5)]
    dates = {1: "2025-01-01", 2: "2025-02-01", 3: "2025-03-01", 4: "2025-04-01", 5: "2025-07-01"}
    sessions = {label: f"s{label}" for label in dates}
    same = unit(1, 0, 0)
    embeddings = {1: same, 2: unit(0, 1, 0), 3: same, 4: unit(1, 0.05, 0), 5: unit(0, 0, 1)}
    changes = dict.fromkeys(dates, False)
    reordered = supersede(
        ranked,
        dates=dates,
        sessions=sessions,
        embeddings=embeddings,
        changes=changes,
        depth=5,
        min_cosine=0.9,
        stated_min_cosine=0.9,
    )
    # 1, 3 and 4 are one thing revised twice: 4 (latest) first, then 3, then 1; 2 and 5 are other things.
    assert [label for label, _ in reordered] == [4, 3, 1, 2, 5]
    assert dict(reordered) == dict(ranked)  # scores travel with their candidates


def test_same_session_dates_and_depth_limit_what_moves() -> None:
    ranked = [(1, 0.9), (2, 0.8), (3, 0.7)]
    embeddings = {label: unit(1, 0, 0) for label in (1, 2, 3)}
    kwargs: dict[str, Any] = {"embeddings": embeddings, "min_cosine": 0.9, "stated_min_cosine": 0.9}
    dates = {1: "2025-01-01", 2: "2025-01-01", 3: "2025-05-01"}
    one_session = dict.fromkeys(dates, "s")
    changes = dict.fromkeys(dates, False)
    assert supersede(ranked, dates=dates, sessions=one_session, changes=changes, depth=3, **kwargs) == ranked
    sessions = {1: "a", 2: "b", 3: "c"}
    moved = supersede(ranked, dates=dates, sessions=sessions, changes=changes, depth=3, **kwargs)
    assert [label for label, _ in moved] == [3, 1, 2]  # 1 and 2 share a date: neither revises the other
    assert supersede(ranked, dates=dates, sessions=sessions, changes=changes, depth=2, **kwargs) == ranked


def test_a_stated_change_needs_less_closeness() -> None:
    ranked = [(1, 0.9), (2, 0.8)]
    embeddings = {1: unit(1, 0), 2: unit(1, 1)}  # cosine 0.707
    common: dict[str, Any] = {
        "dates": {1: "2025-01-01", 2: "2025-06-01"},
        "sessions": {1: "a", 2: "b"},
        "embeddings": embeddings,
        "depth": 2,
        "min_cosine": 0.8,
        "stated_min_cosine": 0.7,
    }
    assert supersede(ranked, changes={1: False, 2: False}, **common) == ranked
    assert [label for label, _ in supersede(ranked, changes={1: False, 2: True}, **common)] == [2, 1]


def test_settled_cues() -> None:
    assert states_settled("Decision (2025-06-18): signature verification is on for all policies")
    assert states_settled("Completed: Fastify 5 upgrade merged in PR #655")
    assert states_settled("Done: PR #412 merged")
    assert states_settled("Cache format switched from bincode to redb")  # a stated change
    assert not states_settled("User asked to verify signatures for every mirrored image")
    assert not states_settled("The decision table lists every rule")  # the word alone, not a decision note


def test_the_outcome_of_a_session_moves_above_its_request_and_details() -> None:
    # 1: the request, 2: a detail of the same session, 3: another session's note, 4: the decision.
    ranked = [(1, 0.9), (2, 0.85), (3, 0.8), (4, 0.7), (5, 0.6)]
    sessions = {1: "s1", 2: "s1", 3: "s2", 4: "s1", 5: "s1"}
    topic = unit(1, 0.2, 0)
    embeddings = {1: topic, 2: topic, 3: topic, 4: unit(1, 0, 0), 5: unit(0, 0, 1)}
    settled = {1: False, 2: False, 3: False, 4: True, 5: True}
    moved = settled_first(ranked, sessions=sessions, settled=settled, embeddings=embeddings, depth=5, min_cosine=0.4)
    # 4 goes above the first unsettled note of its session that is about the same thing; 5 is about
    # something else (cosine 0 to every note above it) and stays; scores travel with their labels.
    assert moved == [(4, 0.7), (1, 0.9), (2, 0.85), (3, 0.8), (5, 0.6)]
    # Outside the depth nothing moves; a settled note above it is not passed.
    assert (
        settled_first(ranked, sessions=sessions, settled=settled, embeddings=embeddings, depth=3, min_cosine=0.4)
        == ranked
    )
    both = {**settled, 1: True, 2: True}
    assert (
        settled_first(ranked, sessions=sessions, settled=both, embeddings=embeddings, depth=5, min_cosine=0.4) == ranked
    )


def test_settled_first_applies_to_questions_about_the_present_only() -> None:
    ranked = [(1, 0.9), (2, 0.8)]
    texts = {1: "User asked to move the build cache", 2: "Decision: the build cache moves to the user cache folder"}
    common: dict[str, Any] = {
        "texts": texts,
        "dates": {1: "2025-06-20 14:00", 2: "2025-06-20 14:05"},
        "sessions": {1: "s1", 2: "s1"},
        "embeddings": {1: unit(1, 0.1), 2: unit(1, 0)},
        "depth": 10,
        "min_cosine": 0.5,
        "stated_min_cosine": 0.4,
    }
    now = "Where does the build cache live now?"
    assert present_supersession(now, ranked, **common) == ranked  # same session: supersession alone keeps it
    assert present_supersession(now, ranked, settled=True, **common) == [(2, 0.8), (1, 0.9)]
    assert present_supersession("Where does the build cache live?", ranked, settled=True, **common) == ranked


def test_settings_are_validated() -> None:
    assert SupersessionSettings().enabled is False  # opt-in: it costs a few LoCoMo questions
    assert SupersessionSettings().settled_first is True  # part of the rule when it is on
    with pytest.raises(ValidationError):
        SupersessionSettings(depth=1)
    with pytest.raises(ValidationError):
        SupersessionSettings(min_cosine=1.5)
    with pytest.raises(ValidationError):
        SupersessionSettings(max_score_gap=-0.1)
    with pytest.raises(ValidationError):
        SupersessionSettings(surprise=True)  # type: ignore[call-arg]


def first_hit(memory: Obsmem, query: str) -> str:
    return memory.search("p", query, mode="hybrid").hits[0].content


def build(tmp_path: Path, server: ModelServer, enabled: bool, revised_session: str = "s2") -> Obsmem:
    section = semantic_settings(server, supersession={"enabled": enabled})
    memory = Obsmem(load_settings(data_dir=tmp_path / f"data-{enabled}-{revised_session}", semantic=section))
    add_memories(memory, "p", [("2025-01-10 09:00", FIRST), ("2025-01-10 09:30", ASIDE)], session="s1")
    add_memories(memory, "p", [("2025-06-20 14:00", REVISED)], session=revised_session)
    memory.index("p")
    return memory


def test_a_small_project_finds_the_latest_decision(tmp_path: Path, model_server: ModelServer) -> None:
    now, then = "Where does the build cache live now?", "Where does the build cache live?"
    with build(tmp_path, model_server, enabled=False) as memory:
        assert first_hit(memory, now) == FIRST  # the fused order, the premise of the test
        assert first_hit(memory, then) == FIRST
    with build(tmp_path, model_server, enabled=True) as memory:
        assert first_hit(memory, now) == REVISED
        assert first_hit(memory, then) == FIRST  # not about the present: the fused order stands


def test_a_later_note_of_the_same_session_does_not_revise(tmp_path: Path, model_server: ModelServer) -> None:
    with build(tmp_path, model_server, enabled=True, revised_session="s1") as memory:
        assert first_hit(memory, "Where does the build cache live now?") == FIRST


REQUEST = "User asked to move the build cache out of the repository into the user cache folder"
OUTCOME = "Decision: the build cache moves out of the repository into the user cache folder"


def test_a_session_outcome_ranks_above_its_request_through_search(tmp_path: Path, model_server: ModelServer) -> None:
    def first(settled: bool, query: str) -> str:
        section = semantic_settings(model_server, supersession={"enabled": True, "settled_first": settled})
        data_dir = tmp_path / f"data-{settled}-{len(query)}"
        with Obsmem(load_settings(data_dir=data_dir, semantic=section)) as memory:
            add_memories(memory, "p", [("2025-06-20 14:00", REQUEST), ("2025-06-20 14:05", OUTCOME)], session="s1")
            add_memories(memory, "p", [("2025-06-21 10:00", ASIDE)], session="s2")
            memory.index("p")
            return first_hit(memory, query)

    now = "Did the user ask to move the build cache to the user cache folder now?"
    assert first(False, now) == REQUEST  # the words favour the request: the premise of the test
    assert first(True, now) == OUTCOME
    assert first(True, now.replace(" now", "")) == REQUEST  # not about the present: the fused order stands


# -- named replacements -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("rust-toolchain.toml bumped from 1.78.0 to 1.85.0 (supersedes 1.78).", [{"1.78.0"}, {"1.78"}]),
        ("CI moved from CircleCI to GitHub Actions; a run now takes 8 minutes.", [{"circleci"}]),
        ("Cache-Control raised from max-age=3600 to max-age=86400", [{"max-age=3600"}]),
        ("Port changed from 8080 to 9090 (supersedes the earlier 8080)", [{"8080"}, {"8080"}]),
        ("Synced scans now kept for 30 days instead of 7, for audits.", [{"7"}]),
        ("Decision: replace zxing-android-embedded with ML Kit 17.2.0", [{"zxing-android-embedded"}]),
        ("Decision: the build cache lives in the user folder, supersedes the first", []),  # names no value
        ("The conflicts table is now only used when two edits race", []),
        ("Upgraded Elixir from 1.17.3 to 1.18.4 and OTP to 27.3", [{"1.17.3"}]),
        ("Attachment storage moved from Heroku Postgres to Neon", [{"heroku", "postgres"}]),
        # Ordinary text is no change: no verb of change before "from", or the passive naming the new value.
        ("Office hours are from 9 to 5.", []),
        ("The team went from Boston to NY for the offsite", []),
        ("Deploys run from 07:30 to 15:00 on weekdays", []),
        ("Redis was replaced by Valkey with no config changes.", []),
        ("This decision is superseded by ADR-12.", []),
        ("Moved the config loader. Then read it from disk to the cache", []),  # never across a sentence
    ],
)
def test_what_a_memory_says_it_replaced(text: str, expected: list[set[str]]) -> None:
    assert replaced_values(text) == expected


def test_a_change_names_the_memory_that_holds_the_value_it_replaced() -> None:
    assert names_replaced("Max zoom raised from 14 to 16 (supersedes z14)", "Max zoom served is 14")
    assert names_replaced("Reminder moved from 24 h to 48 h", "Reminders go out 24 hours before")  # digits decide
    assert names_replaced("Jobs moved from Sidekiq to Solid Queue", "Background jobs run on Sidekiq 7.2")
    assert not names_replaced("Jobs moved from Sidekiq to Solid Queue", "Background jobs run on Resque")
    assert not names_replaced("Max zoom raised from 14 to 16", "Max zoom served is 140")  # whole words only
    assert not names_replaced("Max zoom served is 14", "Max zoom raised from 14 to 16")  # states no change
    moved = "Attachment storage moved from Heroku Postgres to Neon"
    assert names_replaced(moved, "Attachments live in Heroku Postgres large objects")
    assert not names_replaced(moved, "The app runs on Heroku")  # every word of the value, not one of them


def test_questions_anchored_in_the_past() -> None:
    assert asks_about_the_past("Why did we pick Sidekiq?")
    assert asks_about_the_past("Which Rust release was pinned in March?")
    assert asks_about_the_past("What was the zoom limit in 2024?")
    assert not asks_about_the_past("Which Rust release is the project pinned to?")
    assert not asks_about_the_past("Where do crash reports end up?")
    assert asks_about_the_past("How has the session timeout changed?")
    assert not asks_about_the_past("How long does a login last these days before it expires?")
    assert not asks_about_the_past("Why does the importer still run nightly?")  # a present word outweighs


def test_a_later_memory_moves_above_the_one_whose_value_it_replaced() -> None:
    ranked = [(1, 0.9), (2, 0.8), (3, 0.7), (4, 0.6)]
    texts = {
        1: "Max zoom served is 14",
        2: "Tiles are cached for an hour",
        3: "Max zoom raised from 14 to 16",
        4: "Max zoom raised from 16 to 18",
    }
    dates = {1: "2025-01-01", 2: "2025-02-01", 3: "2025-04-01", 4: "2025-07-01"}
    embeddings = {1: unit(1, 0), 2: unit(0, 1), 3: unit(1, 0.2), 4: unit(1, 0.1)}
    common: dict[str, Any] = {"texts": texts, "dates": dates, "embeddings": embeddings, "depth": 4, "min_cosine": 0.4}
    sessions = {label: f"s{label}" for label in dates}
    # 4 replaced 3's 16, 3 replaced 1's 14: the chain ends latest first; 2 names nothing and stays below.
    moved = stated_supersession(ranked, sessions=sessions, **common)
    assert [label for label, _ in moved] == [4, 3, 1, 2]
    assert dict(moved) == dict(ranked)
    # Within one session a change is not taken as a revision of its own session's notes.
    assert stated_supersession(ranked, sessions=dict.fromkeys(dates, "s"), **common) == ranked
    # Too far apart in embedding: a shared number does not tie two memories.
    far = {**embeddings, 3: unit(-1, 1), 4: unit(-1, 1.1)}
    assert [label for label, _ in stated_supersession(ranked, sessions=sessions, **{**common, "embeddings": far})] == [
        1,
        2,
        4,
        3,
    ]
    # Only within the first ``depth``.
    assert stated_supersession(ranked, sessions=sessions, **{**common, "depth": 2}) == ranked
    # Only above a memory dated strictly before it: 3 stays below 1 (the same day), 4 still moves above 3.
    same_day = {**dates, 3: dates[1]}
    moved = stated_supersession(ranked, sessions=sessions, **{**common, "dates": same_day})
    assert [label for label, _ in moved] == [1, 2, 4, 3]


def test_a_named_replacement_never_jumps_over_a_newer_memory() -> None:
    # 2 (April) replaced 1's 14, but 3 (July, ranked between them) is newer: 2 stays below it.
    ranked = [(1, 0.9), (3, 0.8), (2, 0.7)]
    texts = {1: "Max zoom served is 14", 3: "Max zoom is now 18", 2: "Max zoom raised from 14 to 16"}
    dates = {1: "2025-01-01", 2: "2025-04-01", 3: "2025-07-01"}
    embeddings = {label: unit(1, 0) for label in dates}
    sessions = {label: f"s{label}" for label in dates}
    kept = stated_supersession(
        ranked, texts=texts, dates=dates, sessions=sessions, embeddings=embeddings, depth=3, min_cosine=0.4
    )
    assert kept == ranked


PINNED = "Decision: rust-toolchain.toml pins the Rust version 1.78.0 for the project"
BUMPED = "rust-toolchain.toml Rust version bumped from 1.78.0 to 1.85.0"


def test_a_question_without_a_present_word_finds_the_named_replacement(
    tmp_path: Path, model_server: ModelServer, backend_storage: dict[str, Any]
) -> None:
    runs = iter(range(100))

    def first(supersession: dict[str, Any], query: str) -> str:
        section = semantic_settings(model_server, supersession=supersession)
        data_dir = tmp_path / f"data-{next(runs)}"
        settings = load_settings(data_dir=data_dir, semantic=section, **backend_storage)
        with Obsmem(settings) as memory:
            add_memories(memory, "p", [("2025-01-10 09:00", PINNED)], session="s1")
            add_memories(memory, "p", [("2025-06-20 14:00", BUMPED), ("2025-06-20 14:30", ASIDE)], session="s2")
            memory.index("p")
            return first_hit(memory, query)

    asked = "Which Rust version does the project pin?"
    assert first({}, asked) == PINNED  # the fused order (supersession off): the premise of the test
    assert first({"enabled": True}, asked) == BUMPED
    assert first({"enabled": True, "named_replacements": False}, asked) == PINNED
    assert first({"enabled": True, "stated_min_cosine": 0.99}, asked) == PINNED  # not close enough
    assert first({"enabled": True}, "Which Rust version did the project pin first?") == PINNED  # the past


def test_the_reference_search_agrees_with_named_replacements(tmp_path: Path, model_server: ModelServer) -> None:
    for named in (False, True):
        section = semantic_settings(model_server, supersession={"enabled": True, "named_replacements": named})
        with Obsmem(load_settings(data_dir=tmp_path / str(named), semantic=section)) as memory:
            add_memories(memory, "p", [("2025-01-10 09:00", PINNED), ("2025-01-10 09:30", FIRST)], session="s1")
            add_memories(memory, "p", [("2025-06-20 14:00", BUMPED), ("2025-06-20 14:30", REVISED)], session="s2")
            memory.index("p")
            for query in ("Which Rust version does the project pin?", "Where does the build cache live now?"):
                hits = [hit.memory_id for hit in memory.search("p", query, mode="hybrid").hits]
                with memory.database("p").read() as conn:
                    assert hits == reference_search(conn, memory.settings.semantic, query), (named, query)
