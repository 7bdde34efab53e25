"""The receipt check the three recording tools share: one loop, one way of counting, three receipts."""

from __future__ import annotations

import json

from obsmem.pipeline.observe.observer import ItemChecker
from obsmem.pipeline.receipts import ReceiptCheck, is_repetitive
from obsmem.pipeline.reflect.dropper import MAX_IDS_PER_CALL, DropChecker
from obsmem.pipeline.reflect.pool import Pool, PoolObservation, PoolReflection
from obsmem.pipeline.reflect.reflector import ReflectionChecker


def observation(n: int, importance: str = "low") -> PoolObservation:
    return PoolObservation(n, str(n) * 64, f"2026-05-01 10:{n:02d}", importance, f"fact number {n}", 10.0, 0)


POOL = Pool(
    "s1",
    tuple(observation(n) for n in range(1, 4)),
    (PoolReflection(9, "f" * 64, "2026-05-01 11:00", "an older reflection", 5.0),),
    None,
    0,
)


def observer_checker() -> ItemChecker:
    shown = {1: "2026-05-01 10:00", 2: "2026-05-01 10:00"}
    return ItemChecker("s1", shown, lambda memory_id: False, 1000, "2026-05-01 10:00")


def test_every_recording_tool_is_a_receipt_check() -> None:
    checkers = [observer_checker(), ReflectionChecker(POOL, 1000, 100), DropChecker(POOL.by_id(), ["f" * 64], 30.0, 0)]
    for checker in checkers:
        assert isinstance(checker, ReceiptCheck)
        reply = checker.check_call("not json")
        assert checker.rejected == 1 and checker.duplicates == 0
        assert reply["error"].startswith("the arguments are not valid JSON") and checker.key in reply["error"]
        reply = checker.check_call("{}")
        assert checker.rejected == 2 and reply == {"error": f"send a non-empty list: {checker.example}"}


def test_arguments_of_another_json_type_than_an_object_are_named_in_the_error() -> None:
    """A call whose arguments are JSON, but a string (the object encoded twice), a number or a boolean at the
    top level, is one rejected call whose error says what was sent and what to send, in every stage."""
    checkers = [observer_checker(), ReflectionChecker(POOL, 1000, 100), DropChecker(POOL.by_id(), ["f" * 64], 30.0, 0)]
    for checker in checkers:
        sent = {
            json.dumps(json.dumps({checker.key: [{"content": "x"}]})): "a JSON string",
            "42": "a JSON number",
            "-1.5e3": "a JSON number",
            "true": "a JSON boolean",
        }
        for rejected, (arguments, what) in enumerate(sent.items(), start=1):
            reply = checker.check_call(arguments)
            assert reply == {"error": f"the arguments are {what}, not an object; send {checker.example}"}
            assert checker.rejected == rejected and checker.recorded == 0


def test_observer_receipt_keeps_valid_items_beside_rejected_and_duplicate_ones() -> None:
    checker = observer_checker()
    item = {"content": "User states the port is 9090", "timestamp": "2026-05-01 10:00", "importance": "high"}
    reply = checker.check_call(
        json.dumps(
            {"observations": [item | {"source_refs": [1]}, item | {"source_refs": [7]}, item | {"source_refs": ["#1"]}]}
        )
    )
    assert [entry["index"] for entry in reply["recorded"]] == [0]
    assert reply["duplicates"] == [
        {"index": 2, "id": reply["recorded"][0]["id"], "note": "already recorded in this request"}
    ]
    assert reply["rejected"][0]["index"] == 1 and "cite only: #1-#2" in reply["rejected"][0]["reason"]
    assert reply["next"].startswith("Fix and resend only the rejected items")
    assert (checker.rejected, checker.duplicates, len(checker.accepted)) == (1, 1, 1)
    reply = checker.check_call(json.dumps([item | {"source_refs": [2]}]))  # a bare list is accepted too
    assert set(reply) == {"recorded", "next"} and reply["next"].startswith("Record anything else worth keeping")


def test_reflector_receipt_names_duplicates_of_existing_reflections() -> None:
    checker = ReflectionChecker(POOL, 1000, 100)
    reply = checker.check_call(
        json.dumps(
            {
                "reflections": [
                    {"content": "An older reflection", "supporting_observation_ids": ["1" * 12]},
                    {"content": "Facts one and two go together", "supporting_observation_ids": ["f" * 12]},
                ]
            }
        )
    )
    assert reply["duplicates"][0]["note"] == "an existing reflection says this"
    assert "is a reflection: cite observations only" in reply["rejected"][0]["reason"]
    assert (checker.rejected, checker.duplicates, checker.accepted) == (1, 1, {})


def test_dropper_receipt_reads_as_proposals_and_stops_at_the_id_limit() -> None:
    checker = DropChecker(POOL.by_id(), ["f" * 64], 30.0, 0)
    ids = ["1" * 12, "zz", "2" * 64] + ["3" * 64] * MAX_IDS_PER_CALL
    reply = checker.check_call(json.dumps({"observation_ids": ids}))
    assert reply["proposed"][:2] == ["1" * 12, "2" * 12]
    assert len(reply["proposed"]) == MAX_IDS_PER_CALL - 1  # the limit counts items read, rejected ones too
    assert reply["rejected"] == [
        {"index": 1, "reason": "'zz' is not a memory id: use the 12-character id shown in brackets"}
    ]
    assert reply["ignored"] == f"only the first {MAX_IDS_PER_CALL} ids of a call are read"
    assert reply["status"].startswith("3 observations proposed (~30 tokens)")
    assert (checker.rejected, checker.duplicates, len(checker.proposals)) == (1, 0, 3)


def test_repetition_is_caught_only_in_long_degenerate_text() -> None:
    assert is_repetitive("the same phrase " * 40)
    assert not is_repetitive("the same phrase " * 5)
    assert not is_repetitive(" ".join(f"fact {n} about port {n * 7919 % 65536}" for n in range(40)))


def test_content_rules_are_shared_and_the_messages_stay_each_stages_own() -> None:
    observer, reflector = observer_checker(), ReflectionChecker(POOL, 40, 100)
    cases = {
        "": (
            "content is missing: write the fact as one line of text",
            "content is missing: write the reflection as one line of text",
        ),
        "two\nlines": (
            "content must be one line: split it into separate observations, one fact each",
            "content must be one line: split it into separate reflections",
        ),
        "two\u2028lines": (  # a line separator too: a memory's content refuses it when it is stored
            "content must be one line: split it into separate observations, one fact each",
            "content must be one line: split it into separate reflections",
        ),
        "half \ud800 a character": (  # a JSON escape away; once a UnicodeEncodeError out of redaction
            "content is not valid UTF-8 text (it holds a lone surrogate): write it again",
            "content is not valid UTF-8 text (it holds a lone surrogate): write it again",
        ),
        "x" * 41: (None, "content is 41 characters; the limit is 40: shorten it or split it"),
        "bell\x07": (None, "content must not contain control characters"),
        "the same phrase " * 40: (
            "content repeats the same text over and over: write the fact once",
            "content is 639 characters; the limit is 40: shorten it or split it",
        ),
    }
    for content, (observer_says, reflector_says) in cases.items():
        observation = {"content": content, "timestamp": "2026-05-01 10:00", "importance": "low", "source_refs": [1]}
        observed = observer.check_item(observation)
        if observer_says is None:
            assert not isinstance(observed, str) or not observed.startswith("content"), content
        else:
            assert observed == observer_says
        assert reflector.check_item({"content": content, "supporting_observation_ids": ["1" * 12]}) == reflector_says
    long_fact = observer.check_item({"content": "y" * 1001, "timestamp": "2026-05-01 10:00", "importance": "low"})
    assert long_fact == "content is 1001 characters; the limit is 1000: shorten it or split it into separate facts"
    secret = observer.check_item(
        {"content": "The key is sk-abcdefghijklmnopqrstuvwxyz123456", "timestamp": "2026-05-01 10:00"}
        | {"importance": "low", "source_refs": [1]}
    )
    assert not isinstance(secret, str) and "sk-abcdef" not in secret.content and "[REDACTED" in secret.content
