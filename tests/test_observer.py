"""The Observer through the service, a worker pool and a scripted model server on loopback."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from obsmem.app import Obsmem
from obsmem.pipeline.receipts import MAX_ITEMS_PER_CALL, MAX_RECORDED_PER_RUN
from support.pipeline_service import pipeline_options, pipeline_service, user, words
from support.scripted_chat import (
    ObserverScript,
    Reply,
    Request,
    Rounds,
    ScriptedChatServer,
    citable_seqs,
    completion,
    error,
    record,
    text,
    tool_calls,
    tool_results,
)


@pytest.fixture
def service_options(server: ScriptedChatServer) -> dict[str, Any]:
    return pipeline_options(server)


def fill(service: Obsmem, session: str = "s1", n: int = 4) -> None:
    service.append_events("p", session, [user(f"message {i}: " + words(60)) for i in range(n)])


def drain(service: Obsmem) -> None:
    assert service.worker_pool().drain(timeout=60)


def observations(service: Obsmem, session: str = "s1") -> list[tuple[str, str, str, str]]:
    db = service.database("p")
    return db.query(
        "SELECT content, timestamp, importance, source_refs FROM observations WHERE session_id = ? ORDER BY content",
        (session,),
    )


def coverage(service: Obsmem, session: str = "s1") -> list[tuple[int, int, int | None, int]]:
    return service.database("p").query(
        "SELECT seq, part_start, part_end, final FROM coverage WHERE session_id = ? ORDER BY seq, part_start",
        (session,),
    )


def events_of(service: Obsmem, *types: str) -> list[dict[str, Any]]:
    return [event.to_dict() for event in service.pipeline_events("p", types=types, limit=1000)]


def obs(content: str, refs: list[Any], timestamp: str = "2026-05-01 10:32", importance: str = "high") -> dict[str, Any]:
    return {"content": content, "timestamp": timestamp, "importance": importance, "source_refs": refs}


# -- triggering -----------------------------------------------------------------------------------


def test_below_the_buffer_nothing_is_queued_crossing_it_queues_one_job(
    tmp_path: Path, server: ScriptedChatServer
) -> None:
    service = pipeline_service(tmp_path / "data", server, observer={"buffer_tokens": 500})
    service.append_events("p", "s1", [user("short message")])
    assert service.jobs("p").counts.queued == 0
    status = service.session_status("p", "s1")
    assert status.pending_tokens > 0 and status.threshold == 500 and status.status == "idle"
    for _ in range(5):
        service.append_events("p", "s1", [user(words(200))])
    assert service.jobs("p").counts.queued == 1  # deduplicated
    drain(service)
    assert service.session_status("p", "s1").pending_tokens == 0
    assert len(observations(service)) == 6
    service.close()


def test_observation_off_or_unconfigured_queues_nothing(tmp_path: Path) -> None:
    for sections in ({"observer": {"enabled": False}}, {}):
        service = pipeline_service(tmp_path / f"d{len(sections)}", None, **sections)
        service.append_events("p", "s1", [user(words(2000))])
        assert service.jobs("p").counts.queued == 0
        assert service.session_status("p", "s1").observer in ("disabled", "not_configured")
        service.close()


def test_forced_observation_takes_the_backlog_below_the_buffer(tmp_path: Path, server: ScriptedChatServer) -> None:
    service = pipeline_service(tmp_path / "data", server, observer={"buffer_tokens": 100_000})
    service.append_events("p", "s1", [user("the deploy target is eu-west-1")])
    drain(service)
    assert observations(service) == []
    service.observe("p", "s1")
    drain(service)
    assert len(observations(service)) == 1
    assert service.session_status("p", "s1").observed_through_seq == 1
    service.close()


# -- receipts, rejections, rounds ---------------------------------------------------------------


def test_receipts_keep_valid_items_and_explain_rejections(service: Obsmem, server: ScriptedChatServer) -> None:
    seen: dict[str, Any] = {}

    def first(request: Request) -> Reply:
        return record(
            obs("User states the deploy target is eu-west-1", [1]),
            obs("Cites an event it was not shown", [999]),
            obs("Bad time", [2], timestamp="2026-02-30 10:00"),
            obs("Two lines\nin one", [2]),
            obs("Odd importance", [2], importance="urgent"),
            obs("User states the deploy target is eu-west-1", [1]),  # duplicate within the call
            obs("Refs as models write them", ["#2", {"seq": 3}]),
        )

    def second(request: Request) -> Reply:
        seen["receipt"] = tool_results(request)[-1]
        return record(obs("Fixed: user asks whether the cache can be disabled", [2], importance="medium"))

    def third(request: Request) -> Reply:
        seen["second_receipt"] = tool_results(request)[-1]
        return text("done")

    server.responder = Rounds(first, second, third)
    fill(service)
    drain(service)
    receipt = seen["receipt"]
    assert [item["index"] for item in receipt["recorded"]] == [0, 6]
    assert all(len(item["id"]) == 12 for item in receipt["recorded"])
    assert receipt["duplicates"] == [
        {"index": 5, "id": receipt["recorded"][0]["id"], "note": "already recorded in this request"}
    ]
    reasons = {item["index"]: item["reason"] for item in receipt["rejected"]}
    assert "#999, not in this transcript; cite only: #1-#4" in reasons[1]
    assert "timestamp must be 'YYYY-MM-DD HH:MM'" in reasons[2] and "2026-05-01 10:32" in reasons[2]
    assert "one line" in reasons[3]
    assert "importance must be one of" in reasons[4]
    assert "Fix and resend only the rejected items" in receipt["next"]
    assert len(seen["second_receipt"]["recorded"]) == 1
    stored = observations(service)
    assert [row[0] for row in stored] == [
        "Fixed: user asks whether the cache can be disabled",
        "Refs as models write them",
        "User states the deploy target is eu-west-1",
    ]
    assert json.loads(stored[1][3]) == [{"session_id": "s1", "seq": 2}, {"session_id": "s1", "seq": 3}]
    assert [row[0] for row in coverage(service)] == [1, 2, 3, 4]
    (end,) = events_of(service, "om_observation_end")
    assert end["observations"] == 3 and end["rejected"] == 4 and end["duplicates"] == 1 and end["rounds"] == 3
    assert end["stop_reason"] == "done"


def test_a_timestamp_must_be_when_the_cited_events_happened(service: Obsmem, server: ScriptedChatServer) -> None:
    """An observation's timestamp is the time of the events it comes from (search filters by it): one far
    from every cited event (9999-12-31, 0001-01-01, a local clock taken for UTC) is rejected with their
    times, within a margin for rounding; a date the fact refers to stays legal in its content."""
    times = ["2026-05-01T10:32:00Z", "2026-05-01T10:40:00Z", "2026-05-02T09:00:00Z", "2026-05-02T09:05:00Z"]
    service.append_events("p", "s1", [user(f"message {i}: " + words(60), created_at=t) for i, t in enumerate(times)])
    seen: list[Any] = []

    def first(request: Request) -> Reply:
        return record(
            obs("From the far future", [1], timestamp="9999-12-31 23:59"),
            obs("From the distant past", [1], timestamp="0001-01-01 00:00"),
            obs("Rounded up within the margin", [1], timestamp="2026-05-01 10:47"),
            obs("Just past the margin", [1], timestamp="2026-05-01 10:48"),
            obs("Just before the margin", [1], timestamp="2026-05-01 10:16"),
            obs("Between the events it cites", [1, 3], timestamp="2026-05-01 18:00"),
            obs("A local clock taken for UTC", [3, 4], timestamp="2026-05-02 02:00"),
            obs("User plans the release review meeting for 2027-03-10", [4], timestamp="2026-05-02 09:05"),
        )

    def second(request: Request) -> Reply:
        seen.extend(tool_results(request))
        return text("done")

    server.responder = Rounds(first, second)
    drain(service)
    (receipt,) = seen
    assert [item["index"] for item in receipt["recorded"]] == [2, 5, 7]
    reasons = {item["index"]: item["reason"] for item in receipt["rejected"]}
    assert sorted(reasons) == [0, 1, 3, 4, 6]
    assert reasons[0].startswith("timestamp 9999-12-31 23:59 is not when the events it cites happened")
    assert "(at 2026-05-01 10:32, UTC)" in reasons[0] and "(at 2026-05-01 10:32, UTC)" in reasons[1]
    assert "(from 2026-05-02 09:00 to 2026-05-02 09:05, UTC)" in reasons[6]
    assert sorted((row[0], row[1][:16]) for row in observations(service)) == [
        ("Between the events it cites", "2026-05-01 18:00"),
        ("Rounded up within the margin", "2026-05-01 10:47"),
        ("User plans the release review meeting for 2027-03-10", "2026-05-02 09:05"),
    ]


def test_hostile_items_are_rejected_one_by_one_and_the_valid_ones_kept(
    service: Obsmem, server: ScriptedChatServer
) -> None:
    """What a model (or an endpoint in between) may send that once failed the whole cycle, the valid items
    with it: a lone surrogate (an escape in the JSON) in an item or beside the call, a line separator, refs
    that str.isdigit() passes and int() refuses, arguments nested deeper than the parser follows."""
    seen: list[Any] = []

    def first(request: Request) -> Reply:
        reply = tool_calls(
            (
                "record_observations",
                {
                    "observations": [
                        obs("User states the deploy target is eu-west-1", [1]),
                        obs("bad \ud800 text", [2]),
                        obs("one\u2028line", [2]),
                        obs("ref in superscript", ["\u00b2"]),
                        obs("ref past any seq", ["9" * 5000]),
                    ]
                },
            ),
            ("record_observations", "[" * 5000 + "]" * 5000),
            ("record_observations", '{"observations": [{"content": "x", "source_refs": [' + "9" * 5000 + "]}]}"),
        )
        reply.body["choices"][0]["message"]["content"] = "thinking \ud800 aloud"  # type: ignore[index]
        return reply

    def second(request: Request) -> Reply:
        seen.extend(tool_results(request))
        return text("done")

    server.responder = Rounds(first, second)
    fill(service)
    drain(service)
    receipt, deep, long_number = seen
    assert [item["index"] for item in receipt["recorded"]] == [0]
    reasons = {item["index"]: item["reason"] for item in receipt["rejected"]}
    assert "not valid UTF-8" in reasons[1] and "one line" in reasons[2]
    assert "source_refs" in reasons[3] and "source_refs" in reasons[4]
    assert "nested too deeply" in deep["error"] and "a number too long to read" in long_number["error"]
    assert [row[0] for row in observations(service)] == ["User states the deploy target is eu-west-1"]
    assert events_of(service, "om_observation_failed", "job_failed") == []


def test_a_ref_naming_another_session_is_rejected_not_rewritten(service: Obsmem, server: ScriptedChatServer) -> None:
    """A ref is an event shown in this request: one that names another session (or says more than a seq)
    is not, and taking its seq alone would store an observation citing an event of this session that the
    model never meant."""
    seen: list[Any] = []

    def first(request: Request) -> Reply:
        return record(
            obs("User states the deploy target is eu-west-1", [{"session_id": "s1", "seq": 1}]),
            obs("Cites the other session", [{"session_id": "s2", "seq": 1}]),
            obs("Cites another project", [{"project": "q", "seq": 2}]),
        )

    def second(request: Request) -> Reply:
        seen.extend(tool_results(request))
        return text("done")

    server.responder = Rounds(first, second)
    service.append_events("p", "s2", [user("the other session")])
    fill(service)
    drain(service)
    (receipt,) = seen
    assert [item["index"] for item in receipt["recorded"]] == [0]
    assert [item["index"] for item in receipt["rejected"]] == [1, 2]
    assert all("source_refs" in item["reason"] for item in receipt["rejected"])
    assert [row[0] for row in observations(service)] == ["User states the deploy target is eu-west-1"]


def test_an_overlong_item_is_refused_before_any_work_on_its_text(service: Obsmem, server: ScriptedChatServer) -> None:
    """Redaction is not linear on every text (``password=`` over and over took minutes for a megabyte), and
    a model may send megabytes in one item: an item far over the limit is refused at the length it was sent
    with, never redacted first."""
    seen: list[Any] = []
    secret = "sk-proj-" + "Ab1" * 1400  # over four times the limit, and a few characters once redacted

    def first(request: Request) -> Reply:
        return record(
            obs("User states the deploy target is eu-west-1", [1]),
            obs("password=" * 20_000, [1]),
            obs(f"key {secret}", [1]),
        )

    def second(request: Request) -> Reply:
        seen.extend(tool_results(request))
        return text("done")

    server.responder = Rounds(first, second)
    fill(service)
    drain(service)
    (receipt,) = seen
    assert [item["index"] for item in receipt["recorded"]] == [0]
    reasons = [item["reason"] for item in receipt["rejected"]]
    assert reasons[0].startswith("content is 180000 characters; the limit is 1000")
    assert reasons[1].startswith(f"content is {len(secret) + 4} characters; the limit is 1000")
    assert secret not in json.dumps(receipt)


def test_a_run_records_a_bounded_number_of_items(service: Obsmem, server: ScriptedChatServer) -> None:
    """What a run records commits in one transaction that every writer of the project waits for: a model
    answering with hundreds of thousands of items would hold it past the agents' busy timeout."""
    seen: list[Any] = []

    def many(start: int, count: int) -> Callable[[Request], Reply]:
        def reply(request: Request) -> Reply:
            seen.extend(tool_results(request)[len(seen) :])
            return record(
                *(obs(f"User states setting number {n} is enabled", [1 + n % 4]) for n in range(start, start + count))
            )

        return reply

    def last(request: Request) -> Reply:
        seen.extend(tool_results(request)[len(seen) :])
        return text("done")

    server.responder = Rounds(many(0, 600), many(600, 400), many(1000, 400), last)
    fill(service)
    drain(service)
    first, second, third = seen
    assert len(first["recorded"]) == MAX_ITEMS_PER_CALL and "only the first 500 items" in first["unread"]
    assert len(second["recorded"]) == 400 and "rejected" not in second
    assert len(third["recorded"]) == MAX_RECORDED_PER_RUN - MAX_ITEMS_PER_CALL - 400
    assert len(third["rejected"]) == 300
    assert all("the most one run keeps" in item["reason"] for item in third["rejected"])
    assert len(observations(service)) == MAX_RECORDED_PER_RUN


def test_malformed_arguments_and_unknown_tools_get_receipts(service: Obsmem, server: ScriptedChatServer) -> None:
    seen: list[Any] = []

    def first(request: Request) -> Reply:
        return tool_calls(
            ("record_observations", '{"observations": [{"content": "half'),
            ("save_memory", {"x": 1}),
            ("record_observations", {"observations": []}),
        )

    def second(request: Request) -> Reply:
        seen.extend(tool_results(request))
        return record(obs("User prefers tabs over spaces", [1], importance="critical"))

    server.responder = Rounds(first, second, lambda request: text("done"))
    fill(service)
    drain(service)
    assert "not valid JSON" in seen[0]["error"]
    assert "no tool named 'save_memory'" in seen[1]["error"]
    assert "non-empty list" in seen[2]["error"]
    assert [row[0] for row in observations(service)] == ["User prefers tabs over spaces"]


def test_arguments_of_the_wrong_json_type_get_receipts_and_the_valid_call_is_kept(
    service: Obsmem, server: ScriptedChatServer
) -> None:
    """Arguments that are JSON but not an object at the top level (a string, the object encoded twice, a
    number, null) are each one rejected call naming what was sent; a bare list of items is read as the list.
    The cycle goes on, keeps the valid items and covers the chunk."""
    seen: list[Any] = []

    def first(request: Request) -> Reply:
        return tool_calls(
            ("record_observations", json.dumps(json.dumps({"observations": [obs("Encoded twice", [1])]}))),
            ("record_observations", "7"),
            ("record_observations", "null"),
            ("record_observations", [obs("User prefers tabs over spaces", [1])]),
        )

    def second(request: Request) -> Reply:
        seen.extend(tool_results(request))
        return text("done")

    server.responder = Rounds(first, second)
    fill(service)
    drain(service)
    assert seen[0]["error"].startswith("the arguments are a JSON string, not an object; send {")
    assert seen[1]["error"].startswith("the arguments are a JSON number, not an object")
    assert seen[2]["error"].startswith("send a non-empty list")
    assert len(seen[3]["recorded"]) == 1
    assert [row[0] for row in observations(service)] == ["User prefers tabs over spaces"]
    assert len(coverage(service)) == 4 and events_of(service, "om_observation_failed", "job_failed") == []


def test_a_reply_with_hundreds_of_tool_calls_is_read_up_to_a_bound(service: Obsmem, server: ScriptedChatServer) -> None:
    """Every call read is answered in the next request: 300 calls in one reply made it larger than the
    endpoint takes (here 100 KB, as a context window would), refused on every retry, so the chunk was never
    observed. Only the first calls of a reply are read and kept in the conversation; the model is told."""
    from obsmem.pipeline.toolloop import MAX_CALLS_PER_REPLY

    seen: dict[str, Any] = {}

    def first(request: Request) -> Reply:
        calls = [
            ("record_observations", {"observations": [obs(f"Setting {n} is on", [1 + n % 4])]}) for n in range(300)
        ]
        return tool_calls(*calls)

    def second(request: Request) -> Reply:
        seen["assistant"] = next(m for m in request.messages if m["role"] == "assistant")
        seen["results"] = tool_results(request)
        return text("done")

    def endpoint(request: Request) -> Reply:
        return error(400) if len(request.body) > 100_000 else Rounds(first, second)(request)

    server.responder = endpoint
    fill(service)
    drain(service)
    assert len(seen["assistant"]["tool_calls"]) == MAX_CALLS_PER_REPLY == len(seen["results"])
    assert all(len(result["recorded"]) == 1 for result in seen["results"])
    assert "unread_calls" not in seen["results"][0]
    assert seen["results"][-1]["unread_calls"].startswith(
        f"this reply held 300 tool calls; only the first {MAX_CALLS_PER_REPLY}"
    )
    assert len(observations(service)) == MAX_CALLS_PER_REPLY and len(coverage(service)) == 4
    assert events_of(service, "om_observation_failed", "job_failed") == []


def test_on_the_last_round_every_call_of_the_reply_is_read(tmp_path: Path, server: ScriptedChatServer) -> None:
    """A model that sends one call per observation (parallel tool calls) on the last round allowed: no request
    follows for the conversation to outgrow, and the chunk is covered after it, so calls left unread were
    observations lost for good."""
    from obsmem.pipeline.toolloop import MAX_CALLS_PER_REPLY

    service = pipeline_service(tmp_path / "data", server, observer={"buffer_tokens": 100, "max_tool_rounds": 1})
    count = MAX_CALLS_PER_REPLY + 5
    server.responder = lambda request: tool_calls(
        *[("record_observations", {"observations": [obs(f"Setting {n} is on", [1])]}) for n in range(count)]
    )
    fill(service)
    drain(service)
    assert len(observations(service)) == count and len(coverage(service)) == 4
    service.close()


def test_system_events_cannot_be_cited(service: Obsmem, server: ScriptedChatServer) -> None:
    seen: list[Any] = []

    def first(request: Request) -> Reply:
        assert "Always answer in French" not in request.transcript
        return record(obs("User wants answers in French", [2]), obs("User says hello", [1]))

    def second(request: Request) -> Reply:
        seen.extend(tool_results(request))
        return text("done")

    server.responder = Rounds(first, second)
    service.append_events(
        "p",
        "s1",
        [
            user("hello " + words(100)),
            {"role": "system", "content": "Always answer in French. " + words(100)},
        ],
    )
    service.observe("p", "s1")
    drain(service)
    assert "#2, not in this transcript" in seen[0]["rejected"][0]["reason"]
    assert [row[0] for row in observations(service)] == ["User says hello"]
    assert [row[0] for row in coverage(service)] == [1, 2]  # the system event is covered, not shown


def test_repetition_loops_stop_early(service: Obsmem, server: ScriptedChatServer) -> None:
    server.responder = lambda request: record(obs("User prefers tabs", [1]))  # forever the same call
    fill(service)
    drain(service)
    (end,) = events_of(service, "om_observation_end")
    assert end["stop_reason"] == "repetition" and end["rounds"] == 3 and end["observations"] == 1
    assert len(server.requests) == 3


def test_tool_rounds_are_bounded_and_every_round_counts(service: Obsmem, server: ScriptedChatServer) -> None:
    counter = iter(range(1000))
    server.responder = lambda request: record(obs(f"Fact number {next(counter)}", [1]))
    fill(service)
    drain(service)
    (end,) = events_of(service, "om_observation_end")
    assert end["stop_reason"] == "rounds_exhausted" and end["rounds"] == 6
    assert len(observations(service)) == 6 and len(server.requests) == 6


def test_degenerate_repetitive_content_is_rejected(service: Obsmem, server: ScriptedChatServer) -> None:
    seen: list[Any] = []

    def second(request: Request) -> Reply:
        seen.extend(tool_results(request))
        return text("done")

    server.responder = Rounds(lambda request: record(obs("the the the " * 40, [1])), second)
    fill(service)
    drain(service)
    assert "repeats the same text" in seen[0]["rejected"][0]["reason"]
    assert observations(service) == []


def test_already_stored_observations_are_duplicates_not_rewrites(service: Obsmem, server: ScriptedChatServer) -> None:
    fact = obs("User states the deploy target is eu-west-1", [1])
    service.append_events("p", "s1", [user("deploy to eu-west-1")])
    service.add_observations("p", [fact | {"session_id": "s1"}])
    seen: list[Any] = []

    def second(request: Request) -> Reply:
        seen.extend(tool_results(request))
        return text("done")

    server.responder = Rounds(lambda request: record(fact), second)
    service.observe("p", "s1")
    drain(service)
    assert seen[0]["duplicates"][0]["note"] == "already in memory"
    assert "Existing memory, for reference only" in server.requests[0].transcript
    assert "eu-west-1" in server.requests[0].transcript.split("<transcript>")[0]


def test_model_answering_without_tools_covers_the_chunk_with_nothing(
    service: Obsmem, server: ScriptedChatServer
) -> None:
    server.responder = lambda request: text("Nothing here is worth remembering.")
    fill(service)
    drain(service)
    assert observations(service) == [] and len(coverage(service)) == 4


def test_a_reply_cut_off_at_its_output_limit_covers_nothing(service: Obsmem, server: ScriptedChatServer) -> None:
    """A reply that stopped at the model's output limit before any tool call (a small ``max_tokens``, a
    reasoning model thinking past it) is not an answer that nothing was worth recording: covering the chunk
    would lose it for good, so the attempt fails and the events stay unobserved."""
    cut_off = completion({"role": "assistant", "content": "Let me think about which facts to rec"}, "length")
    server.responder = lambda request: Reply(body=cut_off)
    fill(service)
    drain(service)
    assert observations(service) == [] and coverage(service) == []
    status = service.session_status("p", "s1")
    assert status.observed_through_seq == 0 and status.pending_events == 4
    assert status.last_error is not None and status.last_error.code == "model_bad_response"
    assert "output limit" in status.last_error.message
    assert len(events_of(service, "job_failed")) == 1


def test_a_reply_withheld_by_the_content_filter_fails_and_is_retried_boundedly(
    service: Obsmem, server: ScriptedChatServer
) -> None:
    """A reply the endpoint's content filter withheld says nothing about what is worth keeping: covering the
    chunk would lose its events for good. An endpoint that refuses the chunk every time costs one model call
    per attempt, ends in one ``job_failed`` and says so in the session status; housekeeping waits out the
    cool-down before it tries again."""
    withheld = completion({"role": "assistant", "content": None}, "content_filter")
    server.responder = lambda request: Reply(body=withheld)
    fill(service)
    drain(service)
    assert observations(service) == [] and coverage(service) == []
    assert len(server.requests) == 4  # one call per attempt of the job, 4 attempts
    failures = events_of(service, "om_observation_failed")
    assert [f["error"].split(":")[0] for f in failures] == ["model_refused"] * 4
    (gave_up,) = events_of(service, "job_failed")
    assert gave_up["attempts"] == 4 and gave_up["reason"].startswith("model_refused: ")
    status = service.session_status("p", "s1")
    assert status.observed_through_seq == 0 and status.pending_events == 4
    assert status.last_error is not None and status.last_error.code == "model_refused"
    assert "content filter" in status.last_error.message
    service.worker_pool().housekeep()
    assert service.jobs("p").counts.queued == 0 and len(server.requests) == 4
    # Once the endpoint answers again, the same events are observed.
    server.responder = ObserverScript()
    service.observe("p", "s1")
    drain(service)
    assert len(observations(service)) == 4 and len(coverage(service)) == 4
    assert service.session_status("p", "s1").last_error is None


def test_a_withheld_reply_after_recorded_calls_keeps_nothing_of_the_run(
    service: Obsmem, server: ScriptedChatServer
) -> None:
    """What the model recorded before a later reply was withheld is not the whole of what it meant to keep:
    the attempt stores nothing (no half of a chunk's observations) and covers nothing."""
    withheld = completion({"role": "assistant", "content": "Also, the user"}, "content_filter")
    server.responder = Rounds(
        lambda request: record(obs("User states the deploy target is eu-west-1", [1])),
        lambda request: Reply(body=withheld),
    )
    fill(service)
    drain(service)
    assert observations(service) == [] and coverage(service) == []
    assert service.session_status("p", "s1").last_error.code == "model_refused"


# -- failures and retries -------------------------------------------------------------------------


def test_transient_errors_are_retried_by_the_client(tmp_path: Path, server: ScriptedChatServer) -> None:
    service = pipeline_service(tmp_path / "data", server, model={"max_retries": 2})
    script = ObserverScript()
    replies = iter([error(429, retry_after=0.01), error(502)])
    server.responder = lambda request: next(replies, None) or script(request)
    fill(service)
    drain(service)
    assert len(observations(service)) == 4
    assert events_of(service, "om_observation_failed", "job_failed") == []
    service.close()


def test_a_job_that_always_fails_ends_in_exactly_one_job_failed(service: Obsmem, server: ScriptedChatServer) -> None:
    server.responder = lambda request: error(500)
    fill(service)
    drain(service)
    failures = events_of(service, "om_observation_failed")
    assert len(failures) == 4
    assert [f["attempt"] for f in failures] == [1, 2, 3, 4]
    assert all(f["error"].startswith("model_unavailable: ") and f["duration_ms"] >= 0 for f in failures)
    (gave_up,) = events_of(service, "job_failed")
    assert gave_up["attempts"] == 4 and gave_up["kind"] == "observe" and gave_up["session_id"] == "s1"
    assert "HTTP 500" in gave_up["reason"] and "scripted failure" not in gave_up["reason"]
    assert service.jobs("p").counts.to_dict() == {"queued": 0, "running": 0, "done": 0, "failed": 1}
    assert coverage(service) == [] and observations(service) == []
    status = service.session_status("p", "s1")
    assert status.last_error.code == "model_unavailable" and status.pending_tokens > 0
    # The backlog is kept: the next append over the buffer queues a fresh job that succeeds.
    server.responder = ObserverScript()
    fill(service, n=1)
    drain(service)
    assert len(coverage(service)) == 5
    assert service.session_status("p", "s1").last_error is None


def test_a_hanging_model_is_cut_off_and_the_job_retried(tmp_path: Path, server: ScriptedChatServer) -> None:
    service = pipeline_service(tmp_path / "data", server, model={"timeout_seconds": 0.5})
    script = ObserverScript()
    calls = iter(range(100))
    server.responder = lambda request: Reply(hang=True) if next(calls) == 0 else script(request)
    started = time.monotonic()
    fill(service)
    drain(service)
    assert time.monotonic() - started < 10
    (failed,) = events_of(service, "om_observation_failed")
    assert failed["error"].startswith("model_timeout")
    assert len(observations(service)) == 4
    service.close()


def test_without_a_model_the_job_fails_once_without_retrying(tmp_path: Path, server: ScriptedChatServer) -> None:
    service = pipeline_service(tmp_path / "data", server)
    fill(service)
    service.settings.model.base_url = None  # the endpoint was removed from the settings meanwhile
    drain(service)
    (gave_up,) = events_of(service, "job_failed")
    assert gave_up["attempts"] == 1 and gave_up["reason"].startswith("model_not_configured")
    service.close()


# -- coverage -------------------------------------------------------------------------------------


def test_an_oversized_event_is_cut_into_parts_each_covered_once(tmp_path: Path, server: ScriptedChatServer) -> None:
    service = pipeline_service(tmp_path / "data", server, model={"context_window_tokens": 4096})
    budget = service.pipeline.budget().events
    big = "\n".join(f"log line {n}: " + words(12, "trace") for n in range(budget // 4))
    service.append_events("p", "s1", [user("before"), user(big), user("after")])
    service.observe("p", "s1")
    drain(service)
    rows = coverage(service)
    parts = [row for row in rows if row[0] == 2]
    assert len(parts) >= 3
    assert parts[0][1] == 0 and all(parts[i][2] == parts[i + 1][1] for i in range(len(parts) - 1))
    assert [row[3] for row in parts] == [0] * (len(parts) - 1) + [1]
    assert rows[0] == (1, 0, None, 1) and rows[-1][0] == 3
    shown = [citable_seqs(r.transcript) for r in server.requests if r.messages[-1]["role"] == "user"]
    # Event 1 fits but event 2 does not: event 1 goes alone, then the parts of event 2, each alone; the
    # last part has room for event 3 after it.
    assert shown == [[1]] + [[2]] * (len(parts) - 1) + [[2, 3]]
    starts = [e for e in events_of(service, "om_observation_start") if e["partial_event"]]
    assert len(starts) == len(parts)
    sizes = [len(r.body) for r in server.requests]
    assert max(sizes) < 4096 * 6  # every request fits the small window's envelope
    service.close()


def test_late_events_below_the_watermark_are_observed_and_it_never_moves_back(service: Obsmem) -> None:
    service.append_events("p", "s1", [user(words(80), seq=1), user(words(80), seq=2), user(words(80), seq=5)])
    drain(service)
    assert service.session_status("p", "s1").observed_through_seq == 5
    service.append_events("p", "s1", [user("late: " + words(120), seq=3)])
    drain(service)
    assert [row[0] for row in coverage(service)] == [1, 2, 3, 5]
    assert service.session_status("p", "s1").observed_through_seq == 5
    import apsw

    with pytest.raises(apsw.ConstraintError, match="backwards"):
        service.database("p").connection().execute(
            "UPDATE observer_progress SET observed_through_seq = 1 WHERE session_id = 's1'"
        )


def test_cycles_are_logged_with_correlated_start_and_end(service: Obsmem) -> None:
    fill(service)
    drain(service)
    start, end = events_of(service, "om_observation_start", "om_observation_end")
    assert start["cycle_id"] == end["cycle_id"] and len(start["cycle_id"]) == 32
    assert start["tokens_to_observe"] > 0 and start["first_seq"] == 1 and start["last_seq"] == 4
    assert end["duration_ms"] >= 0 and end["tokens_observed"] == start["tokens_to_observe"]
    assert end["observation_tokens"] > 0 and end["observed_through_seq"] == 4
    after_first = service.pipeline_events("p", after=start["id"])
    assert after_first[0].id == end["id"]
    assert service.pipeline_events("p", session_id="other") == []


def test_status_shows_the_observer_running(tmp_path: Path, server: ScriptedChatServer) -> None:
    script = ObserverScript(delay=1.5)
    server.responder = script
    service = pipeline_service(tmp_path / "data", server)
    service.start_workers()
    fill(service)
    deadline = time.monotonic() + 10
    status = service.session_status("p", "s1")
    while status.status != "observing" and time.monotonic() < deadline:
        time.sleep(0.02)
        status = service.session_status("p", "s1")
    assert status.status == "observing"
    assert status.current_activity.stage == "observer" and status.current_activity.tokens > 0
    assert status.jobs.running == 1
    while service.session_status("p", "s1").pending_tokens and time.monotonic() < deadline + 10:
        time.sleep(0.05)
    final = service.session_status("p", "s1")
    assert final.status == "idle" and final.current_activity is None
    assert final.observation_tokens > 0 and final.threshold_percent == 0.0
    service.close()


def test_housekeeping_clears_stale_activity_and_resumes_observation(tmp_path: Path, server: ScriptedChatServer) -> None:
    service = pipeline_service(tmp_path / "data", server, observer={"enabled": False})
    fill(service)  # stored while observation was off
    db = service.database("p")
    db.connection().execute(
        "INSERT INTO current_activity(session_id, job_id, stage, tokens, started_at, updated_at)"
        " VALUES ('s1', 99, 'observer', 10, 0, 0)"
    )
    assert service.session_status("p", "s1").current_activity is None  # stale rows are hidden
    service.close()
    service = pipeline_service(tmp_path / "data", server)  # observation switched on
    pool = service.worker_pool()
    pool.housekeep()
    assert db.path.exists()
    assert service.database("p").query("SELECT count(*) FROM current_activity") == [(0,)]
    assert service.jobs("p").counts.queued == 1
    drain(service)
    assert len(observations(service)) == 4
    service.close()


def test_housekeeping_cool_down_follows_failed_observe_jobs_only(tmp_path: Path, server: ScriptedChatServer) -> None:
    from obsmem.work import eventlog

    service = pipeline_service(tmp_path / "data", server, observer={"enabled": False})
    fill(service)
    service.close()
    service = pipeline_service(tmp_path / "data", server)
    with service.database("p").write() as conn:  # a Reflector that just gave up on this session
        eventlog.record(conn, "job_failed", session_id="s1", job_id=41, data={"kind": "reflect", "attempts": 4})
    service.worker_pool().housekeep()
    assert service.jobs("p").counts.queued == 1  # observation is resumed all the same
    with service.database("p").write() as conn:
        conn.execute("DELETE FROM jobs")
        eventlog.record(conn, "job_failed", session_id="s1", job_id=42, data={"kind": "observe", "attempts": 4})
    service.worker_pool().housekeep()
    assert service.jobs("p").counts.queued == 0  # a failed observe job cools the session down
    service.close()


def test_unknown_session_status_is_not_found(service: Obsmem) -> None:
    from obsmem.errors import NotFound

    fill(service)
    with pytest.raises(NotFound):
        service.session_status("p", "nope")
