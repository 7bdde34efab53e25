"""The LongMemEval loader reads the official file and the subset directory into the same records."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from obsmem.eval.datasets.longmemeval import load_longmemeval


def test_official_file(tmp_path: Path) -> None:
    path = tmp_path / "longmemeval_s.json"
    path.write_text(
        json.dumps(
            [
                {
                    "question_id": "q1",
                    "question_type": "single-session-user",
                    "question": "What degree?",
                    "answer": "Business",
                    "question_date": "2023/05/30 (Tue) 23:40",
                    "haystack_session_ids": ["s1", "s2"],
                    "haystack_dates": ["2023/05/20 (Sat) 02:21", "2023/05/21 (Sun) 10:00"],
                    "haystack_sessions": [
                        [{"role": "user", "content": "I graduated in Business.", "has_answer": True}],
                        [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"}],
                    ],
                    "answer_session_ids": ["s1"],
                },
                {
                    "question_id": "q2_abs",
                    "question_type": "single-session-user",
                    "question": "Pet name?",
                    "answer": "unknown",
                    "question_date": "2023/05/30 (Tue) 23:40",
                    "haystack_session_ids": ["s2"],
                    "haystack_dates": ["2023/05/21 (Sun) 10:00"],
                    "haystack_sessions": [
                        [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"}]
                    ],
                    "answer_session_ids": [],
                },
            ]
        )
    )
    data = load_longmemeval(path)
    assert [q.id for q in data.questions] == ["q1", "q2_abs"]
    first, second = data.questions
    assert first.haystack == ("s1", "s2") and first.answer_sessions == ("s1",) and not first.abstention
    assert second.abstention
    assert data.sessions["s1"].when == datetime(2023, 5, 20, 2, 21)
    assert [t.role for t in data.sessions["s2"].turns] == ["user", "assistant"]


def test_subset_directory(tmp_path: Path) -> None:
    (tmp_path / "sessions.jsonl").write_text(
        "\n".join(
            json.dumps(s)
            for s in [
                {
                    "id": "a",
                    "timestamp": "2023/05/20 (Sat) 02:21",
                    "turns": [{"id": "a_0", "role": "user", "content": "My commute is 45 minutes."}],
                },
                {"id": "b", "timestamp": "not a date", "turns": []},
            ]
        )
    )
    (tmp_path / "questions.jsonl").write_text(
        json.dumps(
            {
                "id": "q",
                "category": "information_extraction",
                "question": "How long is my commute?",
                "ground_truth": {"answer": "45 minutes", "supporting_session_ids": ["a"]},
                "constraints": {"abstention_expected": False},
            }
        )
        + "\n"
    )
    data = load_longmemeval(tmp_path)
    [question] = data.questions
    assert question.haystack == ("a", "b") and question.answer_sessions == ("a",)
    assert data.sessions["b"].when is None
