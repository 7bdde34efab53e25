"""The LoCoMo loader: shape, evidence cleaning, dates, and the two ways of storing a conversation."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from obsmem.eval.datasets.locomo import (
    LocomoFormatError,
    clean_evidence,
    dia_id,
    fact_observations,
    load_locomo,
    parse_session_date,
    split_dia_id,
    turn_observations,
    turns_of,
)


def sample() -> dict:
    return {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a puppy."},
                {
                    "speaker": "Ben",
                    "dia_id": "D1:2",
                    "text": "Cute! What is her name?",
                    "blip_caption": "a photo of a dog",
                    "query": "puppy",
                },
                {"speaker": "Ana", "dia_id": "D1:3", "text": "Her name is Luna."},
            ],
            "session_2_date_time": "10:04 am on 12 June, 2023",
            "session_2": [
                {"speaker": "Ben", "dia_id": "D2:1", "text": "How is Luna?"},
            ],
            "session_3_date_time": "9:00 am on 1 July, 2023",  # a date without a session
        },
        "qa": [
            {"question": "What is the puppy's name?", "answer": "Luna", "evidence": ["D1:3"], "category": 4},
            {"question": "Which pet?", "answer": "a puppy", "evidence": ["D1:1; D2:1"], "category": 1},
            {"question": "Broken ids", "answer": "x", "evidence": ["D:11:26", "D", "D9:9"], "category": 2},
            {"question": "Trick?", "adversarial_answer": "a cat", "evidence": ["D1:1", "D1:1"], "category": 5},
        ],
        "observation": {
            "session_1_observation": {
                "Ana": [["Ana adopted a puppy named Luna.", ["D1:1", "D1:3"]]],
                "Ben": [["Ben likes dogs.", "D1:2"], ["Unsourced.", "D7:7"]],
            },
            "session_2_observation": {"Ben": [["Ben asked about Luna.", "D2:1"]]},
        },
    }


@pytest.fixture
def locomo_file(tmp_path: Path) -> Path:
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample()]))
    return path


def test_loads_sessions_turns_and_dates(locomo_file: Path) -> None:
    [conversation] = load_locomo(locomo_file)
    assert conversation.sample_id == "conv-x"
    assert conversation.speakers == ("Ana", "Ben")
    assert [s.number for s in conversation.sessions] == [1, 2]
    turns = list(conversation.turns())
    assert [t.dia_id for t in turns] == ["D1:1", "D1:2", "D1:3", "D2:1"]
    assert turns[0].when == datetime(2023, 5, 8, 13, 56)
    assert turns[3].timestamp == "2023-06-12 10:04"


def test_document_is_speaker_text_and_caption(locomo_file: Path) -> None:
    [conversation] = load_locomo(locomo_file)
    turns = conversation.turn_index()
    assert turns["D1:1"].document == "Ana: I adopted a puppy."
    assert turns["D1:2"].document == "Ben: Cute! What is her name? [shared an image: a photo of a dog]"


def test_evidence_is_cleaned_and_empty_questions_are_skipped(locomo_file: Path) -> None:
    [conversation] = load_locomo(locomo_file)
    assert [q.evidence for q in conversation.questions] == [("D1:3",), ("D1:1", "D2:1"), ("D1:1",)]
    assert conversation.skipped_questions == 1
    adversarial = conversation.questions[-1]
    assert adversarial.answer == "a cat" and adversarial.category_name == "adversarial"


def test_turn_observations_cite_themselves(locomo_file: Path) -> None:
    [conversation] = load_locomo(locomo_file)
    specs = turn_observations(conversation)
    assert len(specs) == 4
    assert specs[1].content.startswith("Ben: Cute!")
    assert specs[1].source_refs() == [{"session_id": "session-1", "seq": 2}]
    assert specs[3].timestamp == "2023-06-12 10:04"


def test_fact_observations_cite_their_turns(locomo_file: Path) -> None:
    [conversation] = load_locomo(locomo_file)
    specs = fact_observations(conversation)
    assert [s.content for s in specs] == ["Ana adopted a puppy named Luna.", "Ben likes dogs.", "Ben asked about Luna."]
    assert specs[0].cites == ("D1:1", "D1:3")
    assert specs[0].source_refs() == [{"session_id": "session-1", "seq": 1}, {"session_id": "session-1", "seq": 3}]
    assert specs[2].timestamp == "2023-06-12 10:04"


def test_retrieved_memories_map_back_to_turns() -> None:
    assert dia_id("session-12", 4) == "D12:4"
    assert turns_of([("D1:3",), ("D1:1", "D1:3"), ("D2:1",)]) == ["D1:3", "D1:1", "D2:1"]
    with pytest.raises(ValueError):
        dia_id("other-1", 1)


def test_rejects_files_of_another_shape(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"not": "a list"}))
    with pytest.raises(LocomoFormatError):
        load_locomo(path)
    with pytest.raises(LocomoFormatError):
        parse_session_date("yesterday")


@given(st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2100, 1, 1)))
def test_session_dates_round_trip(moment: datetime) -> None:
    moment = moment.replace(second=0, microsecond=0)
    hour = moment.hour % 12 or 12
    half = "pm" if moment.hour >= 12 else "am"
    text = f"{hour}:{moment.minute:02d} {half} on {moment.day} {moment:%B}, {moment.year}"
    assert parse_session_date(text) == moment


KNOWN = {f"D{s}:{t}" for s in range(1, 4) for t in range(1, 6)}


@given(
    st.lists(
        st.one_of(
            st.text(max_size=30),
            st.sampled_from(sorted(KNOWN)),
            st.lists(st.sampled_from(sorted(KNOWN)), max_size=3).map("; ".join),
        )
    )
)
def test_clean_evidence_keeps_only_known_well_formed_ids(raw: list[str]) -> None:
    cleaned = clean_evidence(raw, KNOWN)
    assert set(cleaned) <= KNOWN
    assert len(cleaned) == len(set(cleaned))
    for item in cleaned:
        assert split_dia_id(item)[0] >= 1
