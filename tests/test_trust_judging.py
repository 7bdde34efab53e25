"""Judging after search: a real HTTP judge on loopback (and the model judge through the scripted chat
server); at most three candidates per search, de-duplicated; cold start escalates; failures escalate with
their code, visible in the judgments, the status and the event log; the hits never change."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from obsmem.app import Obsmem
from obsmem.settings import load_settings
from obsmem.trust import LOCAL_USER
from obsmem.trust.judges import Judge, JudgeRequest
from obsmem.trust.ledger import record_judgment
from support.judge_server import JudgeServer, closed_port_url
from support.scripted_chat import ScriptedChatServer, tool_calls


def _service(tmp_path: Path, judge: dict[str, Any], **trust: Any) -> Obsmem:
    return Obsmem(load_settings(data_dir=tmp_path / "data", trust={"judge": judge, **trust}))


def _run_judging(service: Obsmem, project: str = "app") -> list[dict[str, Any]]:
    service.trust.dispatcher.flush()
    assert service.worker_pool().drain(30)
    return service.judgments(project).to_dict()["judgments"]


@pytest.fixture
def judge() -> Iterator[JudgeServer]:
    with JudgeServer(0.9) as server:
        yield server


def test_judging_happens_only_after_a_search_at_most_three_de_duplicated(tmp_path: Path, judge: JudgeServer) -> None:
    with _service(tmp_path, {"provider": "http", "base_url": judge.base_url}) as service:
        for n in range(4):
            service.save_note("app", f"deploy step {n}", situation="when releasing")
        service.save_note("app", "deploy step 0", situation="when releasing", tier="user")  # same text, other tier
        service.save_note("app", "Deploy  STEP 1", situation="When releasing")  # same after case and spaces
        assert service.jobs("app").counts.queued == 0 and judge.requests == []  # writing judges nothing
        before = service.search("app", "deploy", trust="all").to_dict()
        judgments = _run_judging(service)
        assert len(judge.requests) == len(judgments) == 3
        contents = [request["note"]["content"].casefold() for request in judge.requests]
        assert len({" ".join(text.split()) for text in contents}) == 3
        request = judge.requests[0]
        assert request["kind"] == "memory-relevance" and request["query"] == "deploy"
        assert set(request) == {"judgment_id", "kind", "note", "query"}
        assert set(request["note"]) == {"id", "content", "situation"}
        assert request["judgment_id"] in {j["judgment_id"] for j in judgments}
        assert service.search("app", "deploy", trust="all").to_dict() == before


def test_a_credential_in_the_query_is_redacted_before_it_is_stored_or_sent(
    tmp_path: Path, judge: JudgeServer, model_server: Any
) -> None:
    """The query goes into the judge job, the judgment (the calibration corpus) and the judge's request; a
    hybrid search finds candidates by the query's words, so a query with a pasted credential reaches them."""
    from support.semantic_service import add_memories, semantic_settings

    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    settings = load_settings(
        data_dir=tmp_path / "data",
        semantic=semantic_settings(model_server),
        trust={"judge": {"provider": "http", "base_url": judge.base_url}},
    )
    with Obsmem(settings) as service:
        add_memories(service, "app", [("2026-01-01 10:00", "staging deploy moved to Fridays")])
        service.index("app")
        service.save_note("app", "deploy notes for staging")
        service.search("app", f"deploy staging {token}", mode="hybrid", trust="all")
        judgments = _run_judging(service)
        assert [request["query"] for request in judge.requests] == ["deploy staging [REDACTED:github_token]"]
        assert len(judgments) == 1
    for path in (tmp_path / "data").rglob("*.db*"):
        assert token.encode() not in path.read_bytes(), path.name


def test_candidates_ranked_below_pending_ones_are_judged_at_the_next_search(tmp_path: Path) -> None:
    with _service(tmp_path, {"provider": "human"}) as service:
        notes = {service.save_note("app", f"deploy step {n}").note.id for n in range(5)}
        service.search("app", "deploy", trust="all")
        first = _run_judging(service)
        assert len(first) == 3 and all(j["state"] == "escalated" for j in first)
        # The three wait for a person; the next search judges the two it ranked below them.
        service.search("app", "deploy", trust="all")
        judged = {j["note_id"] for j in _run_judging(service)}
        assert judged == notes


def test_cold_start_escalates_then_the_threshold_decides(tmp_path: Path, judge: JudgeServer) -> None:
    with _service(tmp_path, {"provider": "http", "base_url": judge.base_url}, judged_per_search=1) as service:
        for n in range(3):
            service.save_note("app", f"cold fact {n}")
            service.search("app", f"cold fact {n}")
        first = _run_judging(service)
        assert [(j["p"], j["decision"], j["state"]) for j in first] == [(0.9, "escalate", "escalated")] * 3
        for judgment in first:
            service.resolve_judgment("app", judgment["judgment_id"], True)
        service.save_note("app", "warm fact high")
        service.search("app", "warm fact high")
        judge.behaviour = 0.2
        service.trust.dispatcher.flush()
        service.worker_pool().drain(30)
        judge.behaviour = 0.9
        service.save_note("app", "warm fact later")
        service.search("app", "warm fact later")
        decisions = {j["note_id"]: (j["p"], j["decision"], j["state"]) for j in _run_judging(service)}
        by_content = {note.content: note.id for note in service.notes("app").notes}
        assert decisions[by_content["warm fact high"]] == (0.2, "hold", "open")
        assert decisions[by_content["warm fact later"]] == (0.9, "inject", "open")
        # The injected candidate shows in the projection's own section, with its p; memory text unchanged.
        service.append_events("app", "s1", [{"role": "user", "content": "hi"}])
        projection = service.memory("app", "s1").to_dict()
        assert projection["empty"] is True and projection["reflections"] == projection["observations"] == 0
        assert [(n["content"], n["p"], n["trusted"]) for n in projection["untrusted_notes"]] == [
            ("warm fact later", 0.9, False)
        ]
        assert projection["text"].startswith('<obsmem-memory section="untrusted-notes">')
        assert "p=0.90 project: warm fact later" in projection["text"]
        report = service.calibrate_trust("app").to_dict()
        assert report["sample"] == 3 and report["precision_at_threshold"] == 1.0
        assert report["buckets"][9]["count"] == 3


@pytest.mark.parametrize(
    ("behaviour", "code"),
    [
        ("down", "judge_unavailable"),
        ("slow", "judge_timeout"),
        ("garbage", "judge_bad_response"),
        (1.5, "judge_bad_response"),
        (-0.1, "judge_bad_response"),
        ("no-p", "judge_bad_response"),
        ("text-p", "judge_bad_response"),
        (10**400, "judge_bad_response"),  # past what a float holds: once an OverflowError (judge_error)
        ("deep-p", "judge_bad_response"),  # once a RecursionError (judge_error)
        ("status", "judge_unavailable"),
    ],
)
def test_a_failed_judge_call_escalates_visibly(tmp_path: Path, behaviour: Any, code: str) -> None:
    with JudgeServer(behaviour, delay=3.0) as server:
        url = closed_port_url() if behaviour == "down" else server.base_url
        with _service(tmp_path, {"provider": "http", "base_url": url, "timeout_seconds": 0.5}) as service:
            service.append_events("app", "s1", [{"role": "user", "content": "x"}])
            note = service.save_note("app", "secret-free fact about caching").note
            service.search("app", "caching")
            [judgment] = _run_judging(service)
            assert judgment["decision"] == "escalate" and judgment["state"] == "escalated"
            assert judgment["p"] is None and judgment["error"].startswith(f"{code}: ")
            assert "caching" not in judgment["error"]
            status = service.status("app").to_dict()["trust"]
            assert status["judgments"]["escalated"] == 1
            assert status["last_judge_error"]["error"] == judgment["error"]
            [event] = [e.to_dict() for e in service.pipeline_events("app", types=("trust_judgment",))]
            assert event["decision"] == "escalate" and event["error"] == judgment["error"]
            assert event["note_id"] == note.id and "caching" not in json.dumps(event)
            assert service.groom("app").to_dict()["escalated"][0]["judgment_id"] == judgment["judgment_id"]


def _warm(service: Obsmem, project: str = "app") -> None:
    """Three resolved judgments in the project tier: past the cold start, so the threshold decides."""
    notes = [service.save_note(project, f"settled fact {n}").note for n in range(3)]
    with service.database(project).write() as conn:
        for n, note in enumerate(notes):
            record_judgment(conn, f"j{n:016x}", note.note_id, "settled", "http", 0.9, "inject", None)
    for n in range(3):
        service.resolve_judgment(project, f"j{n:016x}", True)
    service.groom(project)


def test_the_memory_version_follows_injections_and_forgets(tmp_path: Path, judge: JudgeServer) -> None:
    with _service(tmp_path, {"provider": "http", "base_url": judge.base_url}, judged_per_search=1) as service:
        service.append_events("app", "s1", [{"role": "user", "content": "hi"}])
        _warm(service)
        note = service.save_note("app", "the release branch is cut on Monday").note
        before = service.memory_version("app", "s1")
        assert service.memory("app", "s1").to_dict()["untrusted_notes"] == []
        service.search("app", "release branch")
        [judgment] = [j for j in _run_judging(service) if j["note_id"] == note.id]
        assert judgment["decision"] == "inject"
        injected = service.memory_version("app", "s1")
        assert injected != before
        assert [n["content"] for n in service.memory("app", "s1").to_dict()["untrusted_notes"]] == [note.content]
        assert service.memory_version("app", "s1") == injected  # nothing changed: the same token
        service.forget_note("app", note.id)
        assert service.memory_version("app", "s1") not in (before, injected)
        assert service.memory("app", "s1").to_dict()["untrusted_notes"] == []


class _BrokenJudge(Judge):
    """A judge with a bug: it raises an error no judge should, its text quoting the note."""

    name = "http"

    def rate(self, request: JudgeRequest) -> float:
        raise RuntimeError(f"cannot rate {request.content}")


def test_a_judge_that_raises_unexpectedly_escalates_without_its_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _service(tmp_path, {"provider": "http", "base_url": closed_port_url()}) as service:
        monkeypatch.setattr(service.trust, "_judge", _BrokenJudge())
        service.append_events("app", "s1", [{"role": "user", "content": "x"}])
        service.save_note("app", "the payroll export runs nightly")
        service.search("app", "payroll")
        [judgment] = _run_judging(service)
        assert (judgment["decision"], judgment["state"], judgment["p"]) == ("escalate", "escalated", None)
        assert judgment["error"] == "judge_error: the judge failed unexpectedly (RuntimeError)"
        assert service.status("app").to_dict()["trust"]["last_judge_error"]["error"] == judgment["error"]
        assert service.jobs("app").counts.failed == 0


def test_a_judge_job_out_of_retries_escalates_each_candidate(tmp_path: Path, judge: JudgeServer) -> None:
    settings = load_settings(
        data_dir=tmp_path / "data",
        trust={"judge": {"provider": "http", "base_url": judge.base_url}, "judged_per_search": 2},
        jobs={"max_retries": 1, "retry_backoff_seconds": 0},
    )
    with Obsmem(settings) as service:
        service.append_events("app", "s1", [{"role": "user", "content": "x"}])
        service.save_note("app", "invoices go out on the first")
        service.save_note("app", "invoices are signed by finance")
        with service.database("app").write() as conn:  # a store that refuses every judgment the judge gave
            conn.execute(
                "CREATE TRIGGER refuse_judged BEFORE INSERT ON judgments WHEN new.error IS NULL"
                " BEGIN SELECT RAISE(ABORT, 'storage refused the judgment'); END"
            )
        service.search("app", "invoices")
        judgments = _run_judging(service)
        # The first attempt stops at the first failure (the queue retries); the last records both as escalations.
        assert len(judge.requests) == 3
        assert len(judgments) == 2
        for judgment in judgments:
            assert (judgment["decision"], judgment["state"], judgment["p"]) == ("escalate", "escalated", None)
            assert judgment["error"] == "judge_error: judging stopped before its decision was stored (ConstraintError)"
        assert service.jobs("app").counts.done == 1


def test_the_model_judge_records_p_through_its_tool(tmp_path: Path) -> None:
    with ScriptedChatServer(lambda request: tool_calls(("record_judgment", {"p": 0.75}))) as chat:
        settings = load_settings(
            data_dir=tmp_path / "data",
            model={"base_url": chat.base_url, "model_id": "judge-model"},
            trust={"judge": {"provider": "model"}},
        )
        with Obsmem(settings) as service:
            service.save_note("app", "the cache lives in /var/cache/app")
            service.search("app", "cache")
            [judgment] = _run_judging(service)
            assert judgment["p"] == 0.75 and judgment["provider"] == "model"
            sent = chat.requests[0].json
            assert sent["tools"][0]["function"]["name"] == "record_judgment"


def test_without_a_judge_nothing_is_queued(tmp_path: Path) -> None:
    with _service(tmp_path, {"provider": "none"}) as service:
        service.save_note("app", "a fact")
        service.search("app", "fact", trust="all")
        service.trust.dispatcher.flush()
        assert service.jobs("app").counts.queued == 0


_WORDS = st.sampled_from(["deploy", "cache", "token", "release", "Friday", "make", "ship"])
_NOTES = st.lists(
    st.tuples(st.lists(_WORDS, min_size=1, max_size=4).map(" ".join), st.sampled_from(["project", "user"])),
    min_size=0,
    max_size=8,
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(notes=_NOTES, query=_WORDS, trust=st.sampled_from(["trusted", "all"]), approve=st.booleans())
@example(notes=[("deploy", "project"), ("deploy", "user")], query="deploy", trust="trusted", approve=True)
def test_hits_with_and_without_a_judge_are_identical(
    tmp_path_factory: pytest.TempPathFactory, notes: list[tuple[str, str]], query: str, trust: str, approve: bool
) -> None:
    """Twin data directories get the same writes; only one has a judge. Judging may only ever add judgments:
    until something is promoted (by a person, the same in both twins) the two answer every search alike."""
    with JudgeServer(0.95) as judge:
        judged_settings = {"judge": {"provider": "http", "base_url": judge.base_url}}
        judged = Obsmem(load_settings(data_dir=tmp_path_factory.mktemp("judged"), trust=judged_settings))
        plain = Obsmem(load_settings(data_dir=tmp_path_factory.mktemp("plain"), trust={"judge": {"provider": "none"}}))
        try:
            for twin in (judged, plain):
                twin.append_events("app", "s1", [{"role": "user", "content": "x"}])  # a user-tier write needs it
                for content, tier in notes:
                    twin.save_note("app", content, tier=tier)
            for _ in range(2):  # before and after judging (and promotion) ran
                with_judge = judged.search("app", query, trust=trust).to_dict()
                without = plain.search("app", query, trust=trust).to_dict()
                assert _comparable(with_judge) == _comparable(without)
                _run_judging(judged)
                if approve:  # a person approves in the judged twin; the same promotion is made in the plain one
                    for judgment in judged.judgments("app").judgments:
                        if judgment.state != "resolved":
                            judged.resolve_judgment("app", judgment.judgment_id, True)
                    promoted = {(item.note.content, item.note.tier) for item in judged.groom("app").promoted}
                    _promote_alike(plain, promoted)
        finally:
            judged.close()
            plain.close()


def _comparable(found: dict[str, Any]) -> dict[str, Any]:
    """A search answer without what differs between two data directories by nature: note dates (the time of
    the write) and the display ids derived from nothing else are kept, as both twins derive them alike."""
    hits = [{key: value for key, value in hit.items() if key not in ("date", "created_at")} for hit in found["hits"]]
    if found["mode"] == "exact":
        # Exact hits come newest first, and a note's date is the time of its write: notes written within the
        # same moment in one twin may be milliseconds apart in the other, so their order differs by nature.
        hits.sort(key=lambda hit: (hit["kind"], hit["id"]))
    return {**found, "hits": hits}


def _promote_alike(service: Obsmem, notes: set[tuple[str, str]]) -> None:
    """Promote the notes with these contents and tiers in the twin without a judge, as a person would: one
    judgment each, resolved true, then a groom pass. The tier belongs to the match: the same text may be a
    note of the project and of the user, and only one of them may have been promoted."""
    for note in service.notes("app", status="candidate").notes:
        if (note.content, note.tier) not in notes:
            continue
        db = service.database("app") if note.tier == "project" else service.trust.stores.user(LOCAL_USER)
        assert db is not None
        judgment_id = "j" + note.note_id[:16]
        with db.write() as conn:
            record_judgment(conn, judgment_id, note.note_id, "twin", "human", None, "escalate", None)
        service.resolve_judgment("app", judgment_id, True)
    service.groom("app")
