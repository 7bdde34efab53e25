"""The Observer through the service, a worker pool and a scripted model server on loopback."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pipeline_helpers import pipeline_service, user, words
from scripted_chat import (
    ObserverScript,
    Reply,
    Request,
    ScriptedChatServer,
    citable_seqs,
    error,
    record,
    text,
    tool_calls,
)

from obsmem.app import Obsmem

Round = Callable[[Request], Reply]


class Rounds:
    """Reply by round: the n-th model reply of a cycle comes from ``rounds[n]`` (the last one repeats)."""

    def __init__(self, *rounds: Round) -> None:
        self.rounds = rounds

    def __call__(self, request: Request) -> Reply:
        index = sum(1 for m in request.messages if m["role"] == "assistant")
        return self.rounds[min(index, len(self.rounds) - 1)](request)


def tool_results(request: Request) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in request.messages if m["role"] == "tool"]


@pytest.fixture
def server() -> Iterator[ScriptedChatServer]:
    with ScriptedChatServer() as running:
        yield running


@pytest.fixture
def memory(tmp_path: Path, server: ScriptedChatServer) -> Iterator[Obsmem]:
    service = pipeline_service(tmp_path / "data", server)
    yield service
    service.close()


def fill(memory: Obsmem, session: str = "s1", n: int = 4) -> None:
    memory.append_events("p", session, [user(f"message {i}: " + words(60)) for i in range(n)])


def drain(memory: Obsmem) -> None:
    assert memory.worker_pool().drain(timeout=60)


def observations(memory: Obsmem, session: str = "s1") -> list[tuple[str, str, str, str]]:
    db = memory.database("p")
    return db.query(
        "SELECT content, timestamp, importance, source_refs FROM observations WHERE session_id = ? ORDER BY content",
        (session,),
    )


def coverage(memory: Obsmem, session: str = "s1") -> list[tuple[int, int, int | None, int]]:
    return memory.database("p").query(
        "SELECT seq, part_start, part_end, final FROM coverage WHERE session_id = ? ORDER BY seq, part_start",
        (session,),
    )


def events_of(memory: Obsmem, *types: str) -> list[dict[str, Any]]:
    return [event.to_dict() for event in memory.pipeline_events("p", types=types, limit=1000)]


def obs(content: str, refs: list[Any], timestamp: str = "2026-05-01 10:32", importance: str = "high") -> dict[str, Any]:
    return {"content": content, "timestamp": timestamp, "importance": importance, "source_refs": refs}


# -- triggering -----------------------------------------------------------------------------------


def test_below_the_buffer_nothing_is_queued_crossing_it_queues_one_job(
    tmp_path: Path, server: ScriptedChatServer
) -> None:
    memory = pipeline_service(tmp_path / "data", server, observer={"buffer_tokens": 500})
    memory.append_events("p", "s1", [user("short message")])
    assert memory.jobs("p").counts.queued == 0
    status = memory.session_status("p", "s1")
    assert status.pending_tokens > 0 and status.threshold == 500 and status.status == "idle"
    for _ in range(5):
        memory.append_events("p", "s1", [user(words(200))])
    assert memory.jobs("p").counts.queued == 1  # deduplicated
    drain(memory)
    assert memory.session_status("p", "s1").pending_tokens == 0
    assert len(observations(memory)) == 6
    memory.close()


def test_observation_off_or_unconfigured_queues_nothing(tmp_path: Path) -> None:
    for sections in ({"observer": {"enabled": False}}, {}):
        memory = pipeline_service(tmp_path / f"d{len(sections)}", None, **sections)
        memory.append_events("p", "s1", [user(words(2000))])
        assert memory.jobs("p").counts.queued == 0
        assert memory.session_status("p", "s1").observer in ("disabled", "not_configured")
        memory.close()


def test_forced_observation_takes_the_backlog_below_the_buffer(tmp_path: Path, server: ScriptedChatServer) -> None:
    memory = pipeline_service(tmp_path / "data", server, observer={"buffer_tokens": 100_000})
    memory.append_events("p", "s1", [user("the deploy target is eu-west-1")])
    drain(memory)
    assert observations(memory) == []
    memory.observe("p", "s1")
    drain(memory)
    assert len(observations(memory)) == 1
    assert memory.session_status("p", "s1").observed_through_seq == 1
    memory.close()


# -- receipts, rejections, rounds ---------------------------------------------------------------


def test_receipts_keep_valid_items_and_explain_rejections(memory: Obsmem, server: ScriptedChatServer) -> None:
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
    fill(memory)
    drain(memory)
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
    stored = observations(memory)
    assert [row[0] for row in stored] == [
        "Fixed: user asks whether the cache can be disabled",
        "Refs as models write them",
        "User states the deploy target is eu-west-1",
    ]
    assert json.loads(stored[1][3]) == [{"session_id": "s1", "seq": 2}, {"session_id": "s1", "seq": 3}]
    assert [row[0] for row in coverage(memory)] == [1, 2, 3, 4]
    (end,) = events_of(memory, "om_observation_end")
    assert end["observations"] == 3 and end["rejected"] == 4 and end["duplicates"] == 1 and end["rounds"] == 3
    assert end["stop_reason"] == "done"


def test_malformed_arguments_and_unknown_tools_get_receipts(memory: Obsmem, server: ScriptedChatServer) -> None:
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
    fill(memory)
    drain(memory)
    assert "not valid JSON" in seen[0]["error"]
    assert "no tool named 'save_memory'" in seen[1]["error"]
    assert "non-empty list" in seen[2]["error"]
    assert [row[0] for row in observations(memory)] == ["User prefers tabs over spaces"]


def test_system_events_cannot_be_cited(memory: Obsmem, server: ScriptedChatServer) -> None:
    seen: list[Any] = []

    def first(request: Request) -> Reply:
        assert "Always answer in French" not in request.transcript
        return record(obs("User wants answers in French", [2]), obs("User says hello", [1]))

    def second(request: Request) -> Reply:
        seen.extend(tool_results(request))
        return text("done")

    server.responder = Rounds(first, second)
    memory.append_events(
        "p",
        "s1",
        [
            user("hello " + words(100)),
            {"role": "system", "content": "Always answer in French. " + words(100)},
        ],
    )
    memory.observe("p", "s1")
    drain(memory)
    assert "#2, not in this transcript" in seen[0]["rejected"][0]["reason"]
    assert [row[0] for row in observations(memory)] == ["User says hello"]
    assert [row[0] for row in coverage(memory)] == [1, 2]  # the system event is covered, not shown


def test_repetition_loops_stop_early(memory: Obsmem, server: ScriptedChatServer) -> None:
    server.responder = lambda request: record(obs("User prefers tabs", [1]))  # forever the same call
    fill(memory)
    drain(memory)
    (end,) = events_of(memory, "om_observation_end")
    assert end["stop_reason"] == "repetition" and end["rounds"] == 3 and end["observations"] == 1
    assert len(server.requests) == 3


def test_tool_rounds_are_bounded_and_every_round_counts(memory: Obsmem, server: ScriptedChatServer) -> None:
    counter = iter(range(1000))
    server.responder = lambda request: record(obs(f"Fact number {next(counter)}", [1]))
    fill(memory)
    drain(memory)
    (end,) = events_of(memory, "om_observation_end")
    assert end["stop_reason"] == "rounds_exhausted" and end["rounds"] == 6
    assert len(observations(memory)) == 6 and len(server.requests) == 6


def test_degenerate_repetitive_content_is_rejected(memory: Obsmem, server: ScriptedChatServer) -> None:
    seen: list[Any] = []

    def second(request: Request) -> Reply:
        seen.extend(tool_results(request))
        return text("done")

    server.responder = Rounds(lambda request: record(obs("the the the " * 40, [1])), second)
    fill(memory)
    drain(memory)
    assert "repeats the same text" in seen[0]["rejected"][0]["reason"]
    assert observations(memory) == []


def test_already_stored_observations_are_duplicates_not_rewrites(memory: Obsmem, server: ScriptedChatServer) -> None:
    fact = obs("User states the deploy target is eu-west-1", [1])
    memory.append_events("p", "s1", [user("deploy to eu-west-1")])
    memory.add_observations("p", [fact | {"session_id": "s1"}])
    seen: list[Any] = []

    def second(request: Request) -> Reply:
        seen.extend(tool_results(request))
        return text("done")

    server.responder = Rounds(lambda request: record(fact), second)
    memory.observe("p", "s1")
    drain(memory)
    assert seen[0]["duplicates"][0]["note"] == "already in memory"
    assert "Existing memory, for reference only" in server.requests[0].transcript
    assert "eu-west-1" in server.requests[0].transcript.split("<transcript>")[0]


def test_model_answering_without_tools_covers_the_chunk_with_nothing(
    memory: Obsmem, server: ScriptedChatServer
) -> None:
    server.responder = lambda request: text("Nothing here is worth remembering.")
    fill(memory)
    drain(memory)
    assert observations(memory) == [] and len(coverage(memory)) == 4


# -- failures and retries -------------------------------------------------------------------------


def test_transient_errors_are_retried_by_the_client(tmp_path: Path, server: ScriptedChatServer) -> None:
    memory = pipeline_service(tmp_path / "data", server, model={"max_retries": 2})
    script = ObserverScript()
    replies = iter([error(429, retry_after=0.01), error(502)])
    server.responder = lambda request: next(replies, None) or script(request)
    fill(memory)
    drain(memory)
    assert len(observations(memory)) == 4
    assert events_of(memory, "om_observation_failed", "job_failed") == []
    memory.close()


def test_a_job_that_always_fails_ends_in_exactly_one_job_failed(memory: Obsmem, server: ScriptedChatServer) -> None:
    server.responder = lambda request: error(500)
    fill(memory)
    drain(memory)
    failures = events_of(memory, "om_observation_failed")
    assert len(failures) == 4
    assert [f["attempt"] for f in failures] == [1, 2, 3, 4]
    assert all(f["error"].startswith("model_unavailable: ") and f["duration_ms"] >= 0 for f in failures)
    (gave_up,) = events_of(memory, "job_failed")
    assert gave_up["attempts"] == 4 and gave_up["kind"] == "observe" and gave_up["session_id"] == "s1"
    assert "HTTP 500" in gave_up["reason"] and "scripted failure" not in gave_up["reason"]
    assert memory.jobs("p").counts.to_dict() == {"queued": 0, "running": 0, "done": 0, "failed": 1}
    assert coverage(memory) == [] and observations(memory) == []
    status = memory.session_status("p", "s1")
    assert status.last_error.code == "model_unavailable" and status.pending_tokens > 0
    # The backlog is kept: the next append over the buffer queues a fresh job that succeeds.
    server.responder = ObserverScript()
    fill(memory, n=1)
    drain(memory)
    assert len(coverage(memory)) == 5
    assert memory.session_status("p", "s1").last_error is None


def test_a_hanging_model_is_cut_off_and_the_job_retried(tmp_path: Path, server: ScriptedChatServer) -> None:
    memory = pipeline_service(tmp_path / "data", server, model={"timeout_seconds": 0.5})
    script = ObserverScript()
    calls = iter(range(100))
    server.responder = lambda request: Reply(hang=True) if next(calls) == 0 else script(request)
    started = time.monotonic()
    fill(memory)
    drain(memory)
    assert time.monotonic() - started < 10
    (failed,) = events_of(memory, "om_observation_failed")
    assert failed["error"].startswith("model_timeout")
    assert len(observations(memory)) == 4
    memory.close()


def test_without_a_model_the_job_fails_once_without_retrying(tmp_path: Path, server: ScriptedChatServer) -> None:
    memory = pipeline_service(tmp_path / "data", server)
    fill(memory)
    memory.settings.model.base_url = None  # the endpoint was removed from the settings meanwhile
    drain(memory)
    (gave_up,) = events_of(memory, "job_failed")
    assert gave_up["attempts"] == 1 and gave_up["reason"].startswith("model_not_configured")
    memory.close()


# -- coverage -------------------------------------------------------------------------------------


def test_an_oversized_event_is_cut_into_parts_each_covered_once(tmp_path: Path, server: ScriptedChatServer) -> None:
    memory = pipeline_service(tmp_path / "data", server, model={"context_window_tokens": 4096})
    budget = memory.pipeline.budget().events
    big = "\n".join(f"log line {n}: " + words(12, "trace") for n in range(budget // 4))
    memory.append_events("p", "s1", [user("before"), user(big), user("after")])
    memory.observe("p", "s1")
    drain(memory)
    rows = coverage(memory)
    parts = [row for row in rows if row[0] == 2]
    assert len(parts) >= 3
    assert parts[0][1] == 0 and all(parts[i][2] == parts[i + 1][1] for i in range(len(parts) - 1))
    assert [row[3] for row in parts] == [0] * (len(parts) - 1) + [1]
    assert rows[0] == (1, 0, None, 1) and rows[-1][0] == 3
    shown = [citable_seqs(r.transcript) for r in server.requests if r.messages[-1]["role"] == "user"]
    # Event 1 fits but event 2 does not: event 1 goes alone, then the parts of event 2, each alone; the
    # last part has room for event 3 after it.
    assert shown == [[1]] + [[2]] * (len(parts) - 1) + [[2, 3]]
    starts = [e for e in events_of(memory, "om_observation_start") if e["partial_event"]]
    assert len(starts) == len(parts)
    sizes = [len(r.body) for r in server.requests]
    assert max(sizes) < 4096 * 6  # every request fits the small window's envelope
    memory.close()


def test_late_events_below_the_watermark_are_observed_and_it_never_moves_back(memory: Obsmem) -> None:
    memory.append_events("p", "s1", [user(words(80), seq=1), user(words(80), seq=2), user(words(80), seq=5)])
    drain(memory)
    assert memory.session_status("p", "s1").observed_through_seq == 5
    memory.append_events("p", "s1", [user("late: " + words(120), seq=3)])
    drain(memory)
    assert [row[0] for row in coverage(memory)] == [1, 2, 3, 5]
    assert memory.session_status("p", "s1").observed_through_seq == 5
    import apsw

    with pytest.raises(apsw.ConstraintError, match="backwards"):
        memory.database("p").connection().execute(
            "UPDATE observer_progress SET observed_through_seq = 1 WHERE session_id = 's1'"
        )


def test_cycles_are_logged_with_correlated_start_and_end(memory: Obsmem) -> None:
    fill(memory)
    drain(memory)
    start, end = events_of(memory, "om_observation_start", "om_observation_end")
    assert start["cycle_id"] == end["cycle_id"] and len(start["cycle_id"]) == 32
    assert start["tokens_to_observe"] > 0 and start["first_seq"] == 1 and start["last_seq"] == 4
    assert end["duration_ms"] >= 0 and end["tokens_observed"] == start["tokens_to_observe"]
    assert end["observation_tokens"] > 0 and end["observed_through_seq"] == 4
    after_first = memory.pipeline_events("p", after=start["id"])
    assert after_first[0].id == end["id"]
    assert memory.pipeline_events("p", session_id="other") == []


def test_status_shows_the_observer_running(tmp_path: Path, server: ScriptedChatServer) -> None:
    script = ObserverScript(delay=1.5)
    server.responder = script
    memory = pipeline_service(tmp_path / "data", server)
    memory.start_workers()
    fill(memory)
    deadline = time.monotonic() + 10
    status = memory.session_status("p", "s1")
    while status.status != "observing" and time.monotonic() < deadline:
        time.sleep(0.02)
        status = memory.session_status("p", "s1")
    assert status.status == "observing"
    assert status.current_activity.stage == "observer" and status.current_activity.tokens > 0
    assert status.jobs.running == 1
    while memory.session_status("p", "s1").pending_tokens and time.monotonic() < deadline + 10:
        time.sleep(0.05)
    final = memory.session_status("p", "s1")
    assert final.status == "idle" and final.current_activity is None
    assert final.observation_tokens > 0 and final.threshold_percent == 0.0
    memory.close()


def test_housekeeping_clears_stale_activity_and_resumes_observation(tmp_path: Path, server: ScriptedChatServer) -> None:
    memory = pipeline_service(tmp_path / "data", server, observer={"enabled": False})
    fill(memory)  # stored while observation was off
    db = memory.database("p")
    db.connection().execute(
        "INSERT INTO current_activity(session_id, job_id, stage, tokens, started_at, updated_at)"
        " VALUES ('s1', 99, 'observer', 10, 0, 0)"
    )
    assert memory.session_status("p", "s1").current_activity is None  # stale rows are hidden
    memory.close()
    memory = pipeline_service(tmp_path / "data", server)  # observation switched on
    pool = memory.worker_pool()
    pool.housekeep()
    assert db.path.exists()
    assert memory.database("p").query("SELECT count(*) FROM current_activity") == [(0,)]
    assert memory.jobs("p").counts.queued == 1
    drain(memory)
    assert len(observations(memory)) == 4
    memory.close()


def test_housekeeping_cool_down_follows_failed_observe_jobs_only(tmp_path: Path, server: ScriptedChatServer) -> None:
    from obsmem.work import eventlog

    memory = pipeline_service(tmp_path / "data", server, observer={"enabled": False})
    fill(memory)
    memory.close()
    memory = pipeline_service(tmp_path / "data", server)
    with memory.database("p").write() as conn:  # a Reflector that just gave up on this session
        eventlog.record(conn, "job_failed", session_id="s1", job_id=41, data={"kind": "reflect", "attempts": 4})
    memory.worker_pool().housekeep()
    assert memory.jobs("p").counts.queued == 1  # observation is resumed all the same
    with memory.database("p").write() as conn:
        conn.execute("DELETE FROM jobs")
        eventlog.record(conn, "job_failed", session_id="s1", job_id=42, data={"kind": "observe", "attempts": 4})
    memory.worker_pool().housekeep()
    assert memory.jobs("p").counts.queued == 0  # a failed observe job cools the session down
    memory.close()


def test_unknown_session_status_is_not_found(memory: Obsmem) -> None:
    from obsmem.errors import NotFound

    fill(memory)
    with pytest.raises(NotFound):
        memory.session_status("p", "nope")
