"""The shipped question sets: the coding set says what it claims (counts, ids, splits, categories, word
overlap), loads through the real write path, and runs from ``obsmem eval questions --set``."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from obsmem.dates import parse_window, stored_minute
from obsmem.errors import ValidationFailed
from obsmem.eval.datasets.question_sets import (
    SET_NAMES,
    QuestionSet,
    content_words,
    memory_fields,
    overlap_by_kind,
    question_set,
    word_overlap,
)
from obsmem.eval.suites.labelled import parse_labelled
from obsmem.memories import ObservationIn
from obsmem.projects import ProjectRegistry
from obsmem.surfaces.cli import cli
from support.model_server import ModelServer

CODING = question_set("coding")
HOLDOUT = question_set("coding-holdout")
KINDS = ("identifier", "paraphrase", "date", "current", "multi", "negative")
# The mean word overlap of each kind with its targets, as docs/eval.md reports it: a change to a set must
# update both.
DOCUMENTED_OVERLAP = {
    "coding": {
        "current": 0.474,
        "date": 0.384,
        "identifier": 0.762,
        "multi": 0.491,
        "overall": 0.413,
        "paraphrase": 0.084,
    },
    "coding-calibration": {
        "current": 0.222,
        "date": 0.391,
        "identifier": 0.757,
        "multi": 0.266,
        "overall": 0.309,
        "paraphrase": 0.108,
    },
    "coding-holdout": {
        "current": 0.256,
        "date": 0.409,
        "identifier": 0.833,
        "multi": 0.466,
        "overall": 0.369,
        "paraphrase": 0.077,
    },
}
# What each set promises: projects, observations, questions, negatives, questions of every other kind.
MINIMUM_SIZE = {
    "coding": (6, 400, 250, 40, 25),
    "coding-holdout": (4, 160, 120, 30, 12),
    "coding-calibration": (4, 170, 120, 28, 8),
}
# The one split of a set written for one purpose only.
ONE_SPLIT = {"coding-holdout": "held_out", "coding-calibration": "calibration"}
# The most exact search returns (newest first) that the identifier questions are measured at.
EXACT_DEPTH = 5


def _memory_id(item: dict[str, Any]) -> str:
    return ObservationIn.model_validate(memory_fields(item)).memory_id()


@pytest.fixture(scope="module", params=["coding", "coding-holdout", "coding-calibration"])
def shipped(request: pytest.FixtureRequest) -> QuestionSet:
    """Each coding-agent set: the tests that take it check both."""
    return question_set(request.param)


@pytest.fixture(scope="module")
def memories(shipped: QuestionSet) -> dict[str, dict[str, Any]]:
    """memory id -> observation (as the data file holds it) for the whole set."""
    found: dict[str, dict[str, Any]] = {}
    for item in shipped.observations():
        memory_id = _memory_id(item)
        assert memory_id not in found, f"duplicate observation: {item['content'][:60]}"
        found[memory_id] = item
    return found


@pytest.fixture(scope="module")
def questions(shipped: QuestionSet) -> list[dict[str, Any]]:
    return shipped.questions()


def _targets(question: dict[str, Any]) -> list[str]:
    return list(question.get("target_ids") or ([question["target_id"]] if question.get("target_id") else []))


def _project_of_session(session_id: str) -> str:
    return session_id.split("-")[3]  # sessions are named <yyyy-mm-dd>-<project>-<topic>


def test_each_set_is_big_enough_in_every_category(
    shipped: QuestionSet, memories: dict[str, Any], questions: list[Any]
) -> None:
    least_projects, least_memories, least_questions, least_negatives, least_per_kind = MINIMUM_SIZE[shipped.name]
    projects = {_project_of_session(item["session_id"]) for item in memories.values()}
    assert len(projects) >= least_projects
    assert len(memories) >= least_memories
    assert len(questions) >= least_questions and len({q["case"] for q in questions}) == len(questions)
    kinds = Counter(q["kind"] for q in questions)
    assert set(kinds) == set(KINDS)
    assert kinds["negative"] >= least_negatives
    assert all(q["label"] == "negative" for q in questions if q["kind"] == "negative")
    assert all(kinds[kind] >= least_per_kind for kind in KINDS)
    months = {item["timestamp"][:7] for item in memories.values()}
    assert len(months) >= 6  # dates over months


def test_every_question_parses_and_every_target_resolves(memories: dict[str, Any], questions: list[Any]) -> None:
    parsed = parse_labelled(questions)
    assert len(parsed) == len(questions)
    by_ref = {item["ref"]: memory_id for memory_id, item in memories.items() if "ref" in item}
    for question in questions:
        targets = _targets(question)
        if question["label"] == "negative":
            assert not targets and question["target_id"] is None, question["case"]
            continue
        assert targets and all(target in memories for target in targets), question["case"]
        # target ids are exactly the memory ids of the observations the question names
        assert [by_ref[ref] for ref in question["targets"]] == targets, question["case"]
        assert all(_project_of_session(memories[t]["session_id"]) == question["project"] for t in targets)
    multi = [q for q in parsed if q.kind == "multi"]
    assert all(len(q.targets) >= 2 and q.match in ("all", "any") for q in multi)


def test_events_cover_every_source_ref(shipped: QuestionSet, memories: dict[str, Any]) -> None:
    sessions = shipped.events_by_session()
    for session_id, events in sessions.items():
        assert [event["seq"] for event in events] == list(range(1, len(events) + 1)), session_id
        assert events[0]["role"] == "user" and all(event["created_at"] for event in events)
    for item in memories.values():
        for ref in item["source_refs"]:
            assert 1 <= ref["seq"] <= len(sessions[ref["session_id"]])


def test_whole_projects_are_held_out(shipped: QuestionSet, questions: list[Any]) -> None:
    if shipped.name in ONE_SPLIT:  # written to measure only, or to choose on only
        assert {q["split"] for q in questions} == {ONE_SPLIT[shipped.name]}
        return
    splits: dict[str, set[str]] = defaultdict(set)
    for question in questions:
        splits[question["project"]].add(question["split"])
    assert all(len(found) == 1 for found in splits.values()), splits  # a project is never split
    held_out = [q for q in questions if q["split"] == "held_out"]
    assert {q["split"] for q in questions} == {"calibration", "held_out"}
    assert len(held_out) >= 0.4 * len(questions)
    for kind in KINDS:  # every category is measured on both splits
        assert {q["split"] for q in questions if q["kind"] == kind} == {"calibration", "held_out"}, kind


def test_identifiers_are_literal_and_within_reach_of_exact_search(
    memories: dict[str, Any], questions: list[Any]
) -> None:
    newest_first = sorted(memories.items(), key=lambda pair: pair[1]["timestamp"], reverse=True)
    for question in questions:
        identifier = question.get("identifier")
        if identifier is None:
            continue
        holders = [memory_id for memory_id, item in newest_first if identifier.lower() in item["content"].lower()]
        if question["label"] == "negative":
            assert not holders, f"{question['case']}: a negative's identifier occurs in memory"
            continue
        assert question["target_id"] in holders, f"{question['case']}: target lacks {identifier}"
        assert holders.index(question["target_id"]) < EXACT_DEPTH, question["case"]
    assert all(q.get("identifier") for q in questions if q["kind"] == "identifier" and q["label"] == "positive")


def test_date_questions_hold_their_target_in_their_window(memories: dict[str, Any], questions: list[Any]) -> None:
    dated = [q for q in questions if q["kind"] == "date"]
    assert dated
    for question in dated:
        window = parse_window(question.get("after"), question.get("before"))
        assert not window.is_open, question["case"]
        for target in _targets(question):
            assert window.contains(stored_minute(memories[target]["timestamp"])), question["case"]


def test_a_current_target_is_the_newest_of_its_numbered_history(
    shipped: QuestionSet, memories: dict[str, Any], questions: list[Any]
) -> None:
    """A decision taken several times is written as refs ``<project>/<thing>-1``, ``-2``, ...: where a
    current-state question's target is one of them, it is the newest."""
    by_ref = {item["ref"]: item for item in memories.values() if "ref" in item}
    checked = 0
    for question in questions:
        if question["kind"] != "current":
            continue
        (ref,) = question["targets"]
        numbered = re.fullmatch(r"(.+)-\d+", ref)
        if numbered is None:
            continue
        history = [other for other in by_ref if re.fullmatch(re.escape(numbered.group(1)) + r"-\d+", other)]
        if len(history) < 2:
            continue
        assert max(history, key=lambda other: by_ref[other]["timestamp"]) == ref, question["case"]
        checked += 1
    assert checked >= {"coding": 14, "coding-holdout": 20, "coding-calibration": 40}[shipped.name]


def test_current_state_targets_are_the_latest_decision() -> None:
    """Where a multi-memory question of the coding set lists the history of a decision (one of its memories
    supersedes an earlier one), the current-state question about it targets the newest entry of that
    history; and most current targets (at least 40 %) say what they supersede."""
    memories = {_memory_id(item): item for item in CODING.observations()}
    questions = CODING.questions()
    histories = [
        _targets(q)
        for q in questions
        if q["kind"] == "multi" and any("supersedes" in memories[t]["content"] for t in _targets(q))
    ]
    current = [q for q in questions if q["kind"] == "current"]
    checked = 0
    for question in current:
        (target,) = _targets(question)
        for history in histories:
            if target in history and len(history) >= 2:
                newest = max(history, key=lambda memory_id: memories[memory_id]["timestamp"])
                assert newest == target, question["case"]
                checked += 1
    assert checked >= 10
    superseding = sum("supersedes" in memories[_targets(q)[0]]["content"] for q in current)
    assert superseding >= 0.4 * len(current)


def test_word_overlap_per_kind_is_as_documented(
    shipped: QuestionSet, memories: dict[str, Any], questions: list[Any]
) -> None:
    text = {memory_id: item["content"] for memory_id, item in memories.items()}
    overlap = overlap_by_kind(questions, text)
    expected = DOCUMENTED_OVERLAP[shipped.name]
    assert overlap == pytest.approx(expected, abs=0.001)
    assert overlap["paraphrase"] <= 0.15 < overlap["identifier"]  # paraphrases share few words with targets
    documented = (Path(__file__).resolve().parents[1] / "docs" / "eval.md").read_text(encoding="utf-8")
    row = " | ".join(f"{expected[kind]:.3f}" for kind in ("paraphrase", "identifier", "date", "current", "multi"))
    if shipped.name == "coding":
        for kind, value in expected.items():
            assert f"| {kind} | {value:.3f} |" in documented, kind
    else:
        assert f"| {shipped.name}: word overlap with targets | {row} | {expected['overall']:.3f} |" in documented


def test_word_overlap_counts_content_words_only() -> None:
    assert content_words("What made the checkout pages slow?") == {"made", "checkout", "pag", "slow"}
    assert word_overlap("Why were the rebuilds slow?", ["Rebuild took 41 s, slow"]) == 1.0
    assert word_overlap("Which warehouse?", ["nothing in common"]) == 0.0
    assert word_overlap("the and of", ["anything"]) == 0.0  # no content words: nothing to share


def test_unknown_set_is_a_clear_error() -> None:
    assert SET_NAMES == ("sample", "coding", "coding-holdout", "coding-calibration")
    with pytest.raises(ValidationFailed) as caught:
        question_set("nope")
    assert caught.value.field == "set" and "sample, coding, coding-holdout, coding-calibration" in caught.value.message


def test_each_set_loads_through_the_write_path(tmp_path: Path, shipped: QuestionSet, memories: dict[str, Any]) -> None:
    registry = ProjectRegistry(tmp_path)
    try:
        db = registry.get(shipped.project, create=True)
        counts = shipped.load(db)
        again = shipped.load(db)  # idempotent: a second load adds nothing
        with db.read() as conn:
            stored = {row[0] for row in conn.execute("SELECT memory_id FROM memories")}
            sources = conn.execute("SELECT count(*) FROM observation_sources").fetchone()[0]
    finally:
        registry.close()
    assert counts["observations"] == again["observations"] == len(memories)
    assert stored == set(memories) and sources == len(memories)


# -- obsmem eval questions --set --------------------------------------------------------------------------


def _invoke(tmp_path: Path, server: ModelServer, *args: str) -> Result:
    cfg = tmp_path / "obsmem.toml"
    cfg.write_text(
        f'[semantic.embedding]\nprovider = "openai"\nbase_url = "{server.base_url}"\nmodel_id = "hashed-words"\n'
        "[semantic.index]\nbackground = false\n",
        encoding="utf-8",
    )
    return CliRunner().invoke(cli, ["--data-dir", str(tmp_path / "data"), "--config", str(cfg), "eval", *args])


def test_set_coding_runs_the_coding_questions(tmp_path: Path, model_server: ModelServer) -> None:
    result = _invoke(tmp_path, model_server, "questions", "--set", "coding", "--modes", "exact,bm25", "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    exact, bm25 = shown["results"]
    assert exact["dataset"] == bm25["dataset"] == "coding set"
    assert exact["questions"] == len(CODING.questions())
    assert exact["by_category"]["identifier"]["hit@5"] == 1.0  # every identifier within exact's first five
    assert exact["by_category"]["negative"]["negative_hit_rate"] == 0.0  # no negative identifier is in memory
    assert {"calibration", "held_out", *KINDS} == set(bm25["by_category"])
    assert shown["never_below"] == {"checked": False, "losses": 0, "rows": []}  # needs vector and hybrid too
    assert "word overlap with targets: current 0.474, date 0.384, identifier 0.762," in " ".join(shown["notes"])
    assert not (tmp_path / "data").exists()  # a temporary data directory, never the user's


def test_set_coding_holdout_runs_its_held_out_questions(tmp_path: Path, model_server: ModelServer) -> None:
    result = _invoke(tmp_path, model_server, "questions", "--set", "coding-holdout", "--modes", "exact", "--json")
    assert result.exit_code == 0, result.output
    (exact,) = json.loads(result.stdout)["results"]
    assert exact["dataset"] == "coding hold-out set" and exact["questions"] == len(HOLDOUT.questions())
    assert exact["by_category"]["identifier"]["hit@5"] == 1.0
    assert {"held_out", *KINDS} == set(exact["by_category"])  # no calibration split to fit anything to


def test_set_sample_is_the_default(tmp_path: Path, model_server: ModelServer) -> None:
    chosen = _invoke(tmp_path, model_server, "questions", "--set", "sample", "--modes", "exact", "--json")
    default = _invoke(tmp_path, model_server, "questions", "--modes", "exact", "--json")
    assert chosen.exit_code == default.exit_code == 0, chosen.output + default.output
    first, second = (json.loads(r.stdout)["results"][0] for r in (chosen, default))
    assert first["dataset"] == second["dataset"] == "labelled questions"
    assert first["questions"] == second["questions"] == 64 and first["metrics"] == second["metrics"]


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--set", "nope"], "no question set 'nope'; the sets are: sample, coding, coding-holdout, coding-calibration"),
        (["--set", "coding", "--project", "p", "--questions", "{questions}"], "--set runs a shipped set"),
    ],
)
def test_bad_set_is_a_clear_error(tmp_path: Path, model_server: ModelServer, args: list[str], text: str) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"label": "negative", "question": "q"}) + "\n", encoding="utf-8")
    result = _invoke(tmp_path, model_server, "questions", *(a.format(questions=path) for a in args))
    assert result.exit_code == 2, result.output
    assert text in result.stderr and "Traceback" not in result.output
