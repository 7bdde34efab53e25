"""The reflect job through the service, a worker pool and a scripted model server on loopback: the threshold
trigger, the Reflector's receipts, the Dropper's ranking and cap, duplicates, failures and crashes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from obsmem.app import Obsmem
from obsmem.pipeline import project, rebuild_active_memory, render_projection
from obsmem.work import JobQueue
from support.pipeline_service import SMALL_REFLECTION, pipeline_options, pipeline_service, user, words
from support.scripted_chat import (
    DropperScript,
    ObserverScript,
    PipelineScript,
    ReflectorScript,
    Reply,
    Request,
    Rounds,
    ScriptedChatServer,
    completion,
    drops,
    error,
    offered_tool,
    reflections,
    shown_observations,
    text,
    tool_results,
)


def done(_: Request) -> Reply:
    return text("done")


def requests_for(server: ScriptedChatServer, tool: str) -> list[Request]:
    return [r for r in server.requests if offered_tool(r) == tool]


@pytest.fixture
def script() -> PipelineScript:
    return PipelineScript(ObserverScript(), ReflectorScript(), DropperScript())


def service_for(tmp_path: Path, server: ScriptedChatServer, **sections: dict[str, Any]) -> Obsmem:
    """A service like the ``service`` fixture's, with ``sections`` merged over :data:`SMALL_REFLECTION`."""
    options = {name: dict(values) for name, values in SMALL_REFLECTION.items()}
    for name, values in sections.items():
        options[name] = options.get(name, {}) | values
    return pipeline_service(tmp_path / "data", server, **options)


@pytest.fixture
def service_options(server: ScriptedChatServer) -> dict[str, Any]:
    return pipeline_options(server, **SMALL_REFLECTION)


def fill(service: Obsmem, session: str = "s1", n: int = 20) -> None:
    service.append_events("p", session, [user(f"message {i}: " + words(30)) for i in range(n)])


def drain(service: Obsmem) -> None:
    assert service.worker_pool().drain(60)


def events_of(service: Obsmem, *types: str) -> list[dict[str, Any]]:
    return [event.to_dict() for event in service.pipeline_events("p", types=types, limit=1000)]


def assert_projection_is_the_ledger(service: Obsmem, session: str = "s1") -> None:
    with service.database("p").read() as conn:
        number, items = rebuild_active_memory(conn, session)
        assert project(conn, session).text == render_projection(session, items, number).text


def test_threshold_promotes_a_generation_and_dropped_observations_stay_searchable(
    service: Obsmem, server: ScriptedChatServer
) -> None:
    fill(service)
    fill(service, "quiet", n=3)  # under the threshold: never reflected on
    drain(service)
    status = service.session_status("p", "s1")
    assert status.generation_count == 1 and status.reflector == "enabled"
    pool = status.pool
    assert pool.reflections == 4 and pool.dropped_observations > 0
    assert pool.observation_tokens <= 60 < status.generation.observation_tokens_before
    assert service.session_status("p", "quiet").generation_count == 0
    assert service.database("p").query("SELECT DISTINCT session_id FROM generations") == [("s1",)]
    projection = service.memory("p", "s1")
    assert projection.generation == 1 and projection.reflections == 4 and projection.observations == pool.observations
    dropped = service.database("p").query(
        "SELECT m.memory_id, m.content FROM dropped_observations AS d JOIN memories AS m ON m.id = d.observation_row"
    )
    for memory_id, content in dropped:
        assert f"[{memory_id[:12]}]" not in projection.text
        assert [hit.id for hit in service.search("p", content, session_id="s1").hits] == [memory_id[:12]]
        assert service.recall("p", memory_id[:12]).sources  # provenance intact
    reflection = service.search("p", "reflection over").hits[0]
    recalled = service.recall("p", reflection.id)
    assert recalled.supporting and all(item.kind == "observation" for item in recalled.supporting)
    assert_projection_is_the_ledger(service)


def test_supporting_ids_are_resolved_or_rejected_with_receipts(
    tmp_path: Path, server: ScriptedChatServer, script: PipelineScript
) -> None:
    def first(request: Request) -> Reply:
        shown = shown_observations(request.transcript)
        a, b, c = shown[0].id, shown[1].id, shown[2].id
        return reflections(
            {"content": "display ids", "supporting_observation_ids": [a, b]},
            {"content": "a bracketed upper-case id", "supporting_observation_ids": [f"[{c.upper()}]"]},
            {"content": "an unknown id", "supporting_observation_ids": ["0" * 12]},
            {"content": "one good, one unknown", "supporting_observation_ids": [a, "f" * 12]},
            {"content": "not an id", "supporting_observation_ids": ["observation one"]},
            {"content": "no support", "supporting_observation_ids": []},
            {"content": "two\nlines", "supporting_observation_ids": [a]},
        )

    script.reflector = Rounds(first, done)
    service = service_for(tmp_path, server, pools={"observations_max_tokens": 100_000})
    fill(service)
    drain(service)
    second = requests_for(server, "record_reflections")[1]
    receipt = tool_results(second)[0]
    assert [item["index"] for item in receipt["recorded"]] == [0, 1]
    rejected = {item["index"]: item["reason"] for item in receipt["rejected"]}
    assert set(rejected) == {2, 3, 4, 5, 6}
    assert "000000000000 is not an observation in the active memory" in rejected[2]
    assert "ffffffffffff is not an observation" in rejected[3]
    assert "not a memory id" in rejected[4] and "non-empty list" in rejected[5] and "one line" in rejected[6]
    # Stored with full ids; the rejected items left nothing behind.
    rows = service.database("p").query(
        "SELECT r.content, length(o.memory_id) FROM memories AS r JOIN reflection_supports AS s"
        " ON s.reflection_row = r.id JOIN memories AS o ON o.id = s.observation_row ORDER BY r.content"
    )
    assert sorted({content for content, _ in rows}) == ["a bracketed upper-case id", "display ids"]
    assert {length for _, length in rows} == {64} and len(rows) == 3
    assert events_of(service, "om_reflection_end")[0]["rejected"] == 5

    # Next run: a reflection's id and an id that is no longer active are not supporting observations.
    existing = service.search("p", "display ids").hits[0].id

    def cite_wrong_kinds(request: Request) -> Reply:
        return reflections({"content": "cites a reflection", "supporting_observation_ids": [existing]})

    script.reflector = Rounds(cite_wrong_kinds, done)
    service.append_events("p", "s1", [user("one more: " + words(20))])
    service.observe("p", "s1")  # a new observation: a new active set, reflected on once observed
    drain(service)
    receipt = tool_results(requests_for(server, "record_reflections")[-1])[0]
    assert "is a reflection: cite observations only" in receipt["rejected"][0]["reason"]
    assert_projection_is_the_ledger(service)
    service.close()


def test_drop_proposals_unknown_rejected_and_over_large_capped_in_rank_order(
    tmp_path: Path, server: ScriptedChatServer, script: PipelineScript
) -> None:
    script.dropper = Rounds(
        lambda request: drops(*["0" * 12, "not-an-id"], *[o.id for o in shown_observations(request.transcript)]),
        done,
    )
    service = service_for(tmp_path, server)
    fill(service)
    drain(service)
    receipt = tool_results(requests_for(server, "drop_observations")[1])[0]
    assert len(receipt["proposed"]) == 20 and len(receipt["rejected"]) == 2
    assert "over budget" in receipt["status"]
    end = events_of(service, "om_dropper_end")[0]
    assert end["proposed"] == 20 and end["rejected"] == 2 and end["capped"] == 20 - end["dropped"] > 0
    assert end["observation_tokens_after"] <= 60 < end["observation_tokens_before"]
    # The fewest drops that reach the target, covered ones first, oldest first within a tier.
    rows = service.database("p").query(
        "SELECT d.rank, d.citations, m.content FROM dropped_observations AS d JOIN memories AS m"
        " ON m.id = d.observation_row ORDER BY d.rank"
    )
    assert [rank for rank, _, _ in rows] == list(range(len(rows)))
    assert all(citations >= 1 for _, citations, _ in rows)  # the four reflections cover twelve observations
    tokens = service.session_status("p", "s1").pool.observation_tokens
    last = len(rows[-1][2]) / 4
    assert tokens <= 60 < tokens + last + 1
    assert_projection_is_the_ledger(service)
    service.close()


def test_duplicate_reflect_jobs_do_nothing(tmp_path: Path, server: ScriptedChatServer) -> None:
    service = service_for(
        tmp_path,
        server,
        reflector={"reflect_after_observation_tokens": 100_000},
        pools={"observations_max_tokens": 100_000},
    )
    fill(service)
    drain(service)
    assert events_of(service, "om_reflection_start") == []  # under this threshold
    queue = JobQueue(service.database("p"))
    payload = {"session_id": "s1", "force": True}
    first = queue.enqueue("reflect", payload, order_key="session:s1", dedupe_key="reflect:dup")
    second = queue.enqueue("reflect", payload, order_key="session:s1", dedupe_key="reflect:dup")
    assert first.created and not second.created and second.job_id == first.job_id
    drain(service)
    calls = len(requests_for(server, "record_reflections"))
    assert calls == 2 and service.session_status("p", "s1").generation_count == 1
    # The same observation set again (no drops: the pool is under its target): claimed already, no model call.
    queue.enqueue("reflect", payload, order_key="session:s1", dedupe_key="reflect:dup")
    service.reflect("p", "s1")
    drain(service)
    assert len(requests_for(server, "record_reflections")) == calls
    assert len(events_of(service, "om_reflection_start")) == 1
    assert service.database("p").query("SELECT count(*), sum(state = 'promoted') FROM generations") == [(1, 1)]
    assert service.database("p").query("SELECT state, count(*) FROM jobs GROUP BY state") == [("done", 4)]
    service.close()


def test_no_new_reflection_changes_nothing_and_is_not_retried(
    service: Obsmem, server: ScriptedChatServer, script: PipelineScript
) -> None:
    script.reflector = Rounds(done)
    fill(service)
    drain(service)
    end = events_of(service, "om_reflection_end")
    assert len(end) == 1 and end[0]["state"] == "unchanged" and end[0]["reflections"] == 0
    assert requests_for(server, "drop_observations") == []  # no reflection, no Dropper
    assert service.session_status("p", "s1").generation_count == 0
    service.pipeline.housekeep("p", service.database("p"))  # the set was reflected on: not queued again
    assert service.database("p").query("SELECT count(*) FROM jobs WHERE state = 'queued'") == [(0,)]


def test_a_reflector_reply_withheld_by_the_content_filter_fails_and_marks_nothing_reflected(
    service: Obsmem, server: ScriptedChatServer, script: PipelineScript
) -> None:
    """A withheld reply is not the Reflector's answer that nothing is new: the pool is not marked reflected
    on, nothing is promoted, and the failure is the session's last error."""
    withheld = completion({"role": "assistant", "content": None}, "content_filter")
    script.reflector = lambda request: Reply(body=withheld)
    fill(service)
    drain(service)
    failures = events_of(service, "om_reflection_failed")
    assert failures and all(f["error"].startswith("model_refused: ") for f in failures)
    assert events_of(service, "om_reflection_end") == []
    assert service.database("p").query("SELECT count(*) FROM memories WHERE kind = 'reflection'") == [(0,)]
    status = service.session_status("p", "s1")
    assert status.generation_count == 0 and status.last_error.code == "model_refused"


def test_the_dropper_runs_only_over_the_target(tmp_path: Path, server: ScriptedChatServer) -> None:
    service = service_for(tmp_path, server, pools={"observations_max_tokens": 1000})
    fill(service)
    drain(service)
    assert service.session_status("p", "s1").generation_count == 1
    assert requests_for(server, "drop_observations") == [] and events_of(service, "om_dropper_start") == []
    service.close()


def test_events_share_the_cycle_and_carry_durations_and_token_counts(service: Obsmem) -> None:
    fill(service)
    drain(service)
    found = events_of(service, "om_reflection_start", "om_dropper_start", "om_reflection_end", "om_dropper_end")
    assert [e["type"] for e in found] == [
        "om_reflection_start",
        "om_dropper_start",
        "om_reflection_end",
        "om_dropper_end",
    ]
    assert len({e["cycle_id"] for e in found}) == 1
    start, _, reflection_end, dropper_end = found
    assert start["generation"] == 0 and start["observations"] == 20 and start["observation_tokens"] > 100
    for end in (reflection_end, dropper_end):
        assert end["generation"] == 1 and end["state"] == "promoted" and end["duration_ms"] >= 0
        assert end["observation_tokens_before"] == start["observation_tokens"] > end["observation_tokens_after"]
    assert reflection_end["reflection_tokens_after"] > reflection_end["reflection_tokens_before"] == 0
    assert service.session_status("p", "s1").last_error is None


def test_status_says_reflecting_while_a_stage_runs(
    tmp_path: Path, server: ScriptedChatServer, script: PipelineScript
) -> None:
    script.reflector = ReflectorScript(delay=0.6)
    script.dropper = DropperScript(delay=0.6)
    service = service_for(tmp_path, server)
    service.start_workers(housekeeping=False)
    fill(service)
    seen: set[str] = set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and service.session_status("p", "s1").generation_count == 0:
        state = service.session_status("p", "s1")
        if state.current_activity:
            seen.add(f"{state.status}:{state.current_activity.stage}")
        time.sleep(0.05)
    service.close()
    assert {"reflecting:reflector", "reflecting:dropper"} <= seen


def test_a_failed_stage_keeps_the_previous_generation_and_the_retry_succeeds(
    tmp_path: Path, server: ScriptedChatServer, script: PipelineScript
) -> None:
    failures = {"left": 1}
    healthy = DropperScript()

    def flaky(request: Request) -> Reply:
        if failures["left"]:
            failures["left"] -= 1
            return error(500)
        return healthy(request)

    script.dropper = flaky
    service = service_for(tmp_path, server)
    fill(service)
    drain(service)
    found = events_of(service, "om_reflection_failed", "om_dropper_failed", "om_reflection_end")
    assert [e["type"] for e in found] == ["om_reflection_failed", "om_dropper_failed", "om_reflection_end"]
    failed_cycle = found[0]["cycle_id"]
    assert found[1]["cycle_id"] == failed_cycle != found[2]["cycle_id"]
    assert found[0]["error"].startswith("model_unavailable") and found[0]["stage"] == "dropper"
    # Only the retry's reflections exist: the failed attempt wrote nothing.
    assert service.database("p").query("SELECT count(*) FROM memories WHERE kind = 'reflection'") == [(4,)]
    assert service.database("p").query("SELECT claims, state FROM generations") == [(2, "promoted")]
    assert service.session_status("p", "s1").last_error is None
    service.close()


def test_a_crash_inside_the_promotion_commits_nothing(
    tmp_path: Path, server: ScriptedChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import obsmem.pipeline.reflect.job as reflect_job

    real_promote = reflect_job.promote
    crashes = {"left": 1}

    def promote_then_die(*args: Any, **kwargs: Any) -> Any:
        result = real_promote(*args, **kwargs)  # everything written, then the worker dies before COMMIT
        if crashes["left"]:
            crashes["left"] -= 1
            raise SystemExit("killed mid-transaction")
        return result

    monkeypatch.setattr(reflect_job, "promote", promote_then_die)
    service = service_for(tmp_path, server)
    fill(service)
    pool = service.worker_pool()
    with pytest.raises(SystemExit):
        while pool.run_next():
            pass
    db = service.database("p")
    assert db.query("SELECT count(*) FROM memories WHERE kind = 'reflection'") == [(0,)]
    assert db.query("SELECT count(*) FROM dropped_observations") == [(0,)]
    assert db.query("SELECT state FROM generations") == [("running",)]
    assert service.session_status("p", "s1").generation_count == 0
    assert_projection_is_the_ledger(service)
    # The job's lease runs out like a dead worker's; the retry takes the claim over and promotes.
    db.query("UPDATE jobs SET lease_expires = 0, run_after = 0 WHERE state = 'running'")
    drain(service)
    assert db.query("SELECT state, claims FROM generations") == [("promoted", 2)]
    assert service.session_status("p", "s1").generation_count == 1
    assert_projection_is_the_ledger(service)
    service.close()


def test_observation_and_reflection_of_one_session_never_overlap(
    tmp_path: Path, server: ScriptedChatServer, script: PipelineScript
) -> None:
    running: dict[str, int] = {"now": 0, "most": 0}
    lock = threading.Lock()

    def counted(inner: Callable[[Request], Reply]) -> Callable[[Request], Reply]:
        def respond(request: Request) -> Reply:
            with lock:
                running["now"] += 1
                running["most"] = max(running["most"], running["now"])
            try:
                time.sleep(0.05)
                return inner(request)
            finally:
                with lock:
                    running["now"] -= 1

        return respond

    script.observer = counted(ObserverScript())
    script.reflector = counted(ReflectorScript())
    script.dropper = counted(DropperScript())
    service = service_for(tmp_path, server)
    service.start_workers(threads=4, housekeeping=False)
    for _n in range(6):
        fill(service, n=8)
        time.sleep(0.1)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        counts = service.jobs("p").counts
        if not counts.queued and not counts.running:
            break
        time.sleep(0.05)
    generations = service.session_status("p", "s1").generation_count
    kinds = service.database("p").query("SELECT kind, count(*) FROM jobs GROUP BY kind")
    service.close()
    assert running["most"] == 1, kinds  # one session: its jobs run one at a time
    assert generations >= 1, kinds


def test_reflections_and_dropped_observations_are_found_in_hybrid_mode(
    tmp_path: Path, server: ScriptedChatServer
) -> None:
    from support.semantic_service import ModelServer, semantic_settings

    embeddings = ModelServer()
    try:
        service = service_for(tmp_path, server, semantic=semantic_settings(embeddings))
        fill(service)
        drain(service)
        service.index("p")
        reflection = service.search("p", "reflection over", mode="hybrid").hits[0]
        assert reflection.kind == "reflection"
        dropped_id, content = service.database("p").query(
            "SELECT m.memory_id, m.content FROM dropped_observations AS d JOIN memories AS m"
            " ON m.id = d.observation_row LIMIT 1"
        )[0]
        assert dropped_id in [hit.memory_id for hit in service.search("p", content, mode="hybrid").hits]
        # Keyword documents: reflections carry no neighbour context; a dropped observation is still what
        # was said in its place, so it stays its neighbours' neighbour. Both equal a from-scratch computation.
        from support.hybrid_reference import index_matches_memories

        with service.database("p").read() as conn:
            facts = index_matches_memories(conn, service.settings.semantic)
            assert facts["contexts_wrong"] == 0 and facts["missing"] == 0 and facts["stale"] == 0
            assert (
                conn.execute(
                    "SELECT count(*) FROM semantic_context AS x JOIN memories AS m ON m.id = x.memory_row"
                    " WHERE m.kind = 'reflection' AND (x.previous_row IS NOT NULL OR x.next_row IS NOT NULL)"
                ).fetchone()[0]
                == 0
            )
            assert (
                conn.execute(
                    "SELECT count(*) FROM semantic_context AS x JOIN dropped_observations AS d"
                    " ON d.observation_row = x.previous_row OR d.observation_row = x.next_row"
                ).fetchone()[0]
                > 0
            )
        service.close()
    finally:
        embeddings.stop()
