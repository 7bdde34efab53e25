"""Small eval datasets written for the harness tests: LoCoMo, LongMemEval (both layouts), labelled questions,
and the memories and questions of the reranker floor calibration.

Every question's evidence shares distinctive words with it, so BM25 (and the hashed-words loopback
embeddings) can find it; a few evidence ids are malformed the way the real LoCoMo file's are.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _turns(session: int, lines: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return [{"speaker": who, "dia_id": f"D{session}:{i}", "text": text} for i, (who, text) in enumerate(lines, 1)]


def locomo_sample(sample_id: str, a: str, b: str, topic: str) -> dict[str, Any]:
    s1 = _turns(
        1,
        [
            (a, f"I started learning the {topic} last spring."),
            (b, "That sounds fun! Who teaches you?"),
            (a, "A neighbour called Marisol gives me lessons on Sundays."),
            (b, "I went hiking near the glacier lake with my cousin."),
            (a, "Was the glacier lake cold?"),
            (b, "Freezing, but the turquoise water was worth it."),
        ],
    )
    s1[1]["blip_caption"] = "a photo of a wooden instrument on a table"
    s2 = _turns(
        2,
        [
            (b, "I adopted a grey kitten named Pixel."),
            (a, f"Lovely! My {topic} recital is next Friday."),
            (b, "Good luck with the recital. Pixel knocked over my coffee."),
            (a, "Marisol says I am ready for the recital."),
        ],
    )
    return {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": a,
            "speaker_b": b,
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": s1,
            "session_2_date_time": "10:04 am on 12 June, 2023",
            "session_2": s2,
            "session_3_date_time": "9:00 am on 1 July, 2023",  # a date without a session
        },
        "qa": [
            {"question": f"Who gives {a} lessons?", "answer": "Marisol", "evidence": ["D1:3"], "category": 4},
            {
                "question": "Where did they go hiking with the cousin?",
                "answer": "glacier lake",
                "evidence": ["D1:4; D1:6"],
                "category": 1,
            },
            {"question": "What is the kitten called?", "answer": "Pixel", "evidence": ["D2:1"], "category": 2},
            {
                "question": f"When is the {topic} recital?",
                "answer": "next Friday",
                "evidence": ["D:2:2", "D2:2"],
                "category": 3,
            },
            {"question": "Broken evidence", "answer": "x", "evidence": ["D9:9", "D"], "category": 5},
            {
                "question": "What did the kitten knock over?",
                "adversarial_answer": "a vase",
                "evidence": ["D2:3"],
                "category": 5,
            },
        ],
        "observation": {
            "session_1_observation": {
                a: [[f"{a} is learning the {topic} from Marisol on Sundays.", ["D1:1", "D1:3"]]],
                b: [[f"{b} went hiking at a glacier lake with a cousin.", "D1:4"], ["An unsourced fact.", "D7:7"]],
            },
            "session_2_observation": {
                b: [[f"{b} adopted a grey kitten named Pixel.", "D2:1"]],
                a: [[f"{a} has a {topic} recital next Friday.", ["D2:2", "D2:4"]]],
            },
        },
    }


def write_locomo(path: Path) -> Path:
    samples = [locomo_sample("conv-1", "Ana", "Ben", "violin"), locomo_sample("conv-2", "Caro", "Dev", "cello")]
    path.write_text(json.dumps(samples), encoding="utf-8")
    return path


def _session(topic: str, answer: bool = False) -> list[dict[str, Any]]:
    turns = [
        {"role": "user", "content": f"Can you help me plan a {topic} weekend?"},
        {"role": "assistant", "content": f"Sure, here is a plan for {topic}:\n1. start early\n2. pack light"},
    ]
    if answer:
        turns[0]["has_answer"] = True
    return turns


LONGMEMEVAL_TOPICS = ["kayaking", "baking sourdough", "chess openings", "birdwatching", "pottery glazes"]


def write_longmemeval_official(path: Path) -> Path:
    ids = [f"s_{i}" for i in range(len(LONGMEMEVAL_TOPICS))]
    sessions = [_session(t) for t in LONGMEMEVAL_TOPICS]
    dates = [f"2023/05/{20 + i:02d} (Sat) 0{i}:21" for i in range(len(ids))]

    def question(qid: str, text: str, answers: list[str], size: int = len(ids)) -> dict[str, Any]:
        return {
            "question_id": qid,
            "question_type": "single-session-user",
            "question": text,
            "answer": "x",
            "question_date": "2023/06/01 (Thu) 10:00",
            "haystack_session_ids": ids[:size],
            "haystack_dates": dates[:size],
            "haystack_sessions": sessions[:size],
            "answer_session_ids": answers,
        }

    data = [
        question("q1", "Which kayaking weekend did we plan?", ["s_0"]),
        question("q2", "What about sourdough baking and chess openings?", ["s_1", "s_2"]),
        question("q3_abs", "What did I say about skydiving?", []),
        question("q4", "Any tips on chess openings?", ["s_2"], size=3),  # a smaller haystack of its own
    ]
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def write_longmemeval_subset(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "sessions.jsonl").open("w", encoding="utf-8") as handle:
        for i, topic in enumerate(LONGMEMEVAL_TOPICS):
            turns = [{"id": f"t{i}-{j}", "session_id": f"pool {i}", **t} for j, t in enumerate(_session(topic))]
            handle.write(
                json.dumps({"id": f"pool {i}", "timestamp": f"2023/05/{20 + i:02d} (Sat) 02:21", "turns": turns}) + "\n"
            )
    questions = [
        {
            "id": "a",
            "category": "knowledge-update",
            "question": "How do I glaze pottery?",
            "ground_truth": {"answer": "x", "supporting_session_ids": ["pool 4"]},
        },
        {
            "id": "b",
            "category": "temporal-reasoning",
            "question": "When did we talk about birdwatching?",
            "ground_truth": {"answer": "x", "supporting_session_ids": ["pool 3"]},
        },
        {
            "id": "c",
            "category": "abstention",
            "question": "What is my cat's name?",
            "ground_truth": {"answer": "unknown", "supporting_session_ids": []},
            "constraints": {"abstention_expected": True},
        },
    ]
    with (directory / "questions.jsonl").open("w", encoding="utf-8") as handle:
        for item in questions:
            handle.write(json.dumps(item) + "\n")
    return directory


# Memories and labelled questions for reranker floor calibration (word-overlap scores on the loopback reranker).
CALIBRATION_MEMORIES = [
    "flaky login test fixed by mocking the clock",
    "deploy to arm64 runners failed on the docker layer cache",
    "postgres vacuum schedule moved to the night window",
    "billing ledger rename finished and the schema migration ran",
    "redis timeout raised retry count for the queue worker",
    "user prefers tabs over spaces in the linter config",
    "release tag built the docker image twice",
    "backup restore drill took forty minutes",
]
# (split, question, index of the target memory or None for a negative)
CALIBRATION_QUESTIONS = [
    ("calibration", "how was the flaky login test fixed", 0),
    ("calibration", "why did arm64 docker deploy fail", 1),
    ("calibration", "when does postgres vacuum run", 2),
    ("calibration", "what is the kubernetes ingress setup", None),
    ("calibration", "which graphql schema did we pick", None),
    ("held_out", "which redis timeout for the queue worker", 4),
    ("held_out", "tabs or spaces in linter", 5),
    ("held_out", "backup restore drill duration", 7),
    ("held_out", "the saml sso rollout", None),
    ("held_out", "mobile app crash reports", None),
]
