"""Notes that earn trust, through the Python API: writes are candidates, search shows trusted notes (and
candidates only when asked, marked), forget hides at once, an update supersedes only on promotion, groom
promotes at most its cap per pass, and the ledger records every step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from obsmem.app import Obsmem
from obsmem.errors import NotFound, ObsmemError, ValidationFailed
from obsmem.settings import load_settings
from obsmem.trust import LOCAL_USER, decide_injection
from obsmem.trust import notes as notes_module
from obsmem.trust.ledger import ledger_entries, record_judgment, resolve_judgment, trust_version


@pytest.fixture
def service_options() -> dict[str, Any]:
    return {"trust": {"judge": {"provider": "human"}}}


def _judged(service: Obsmem, project: str) -> list[dict[str, Any]]:
    service.trust.dispatcher.flush()
    service.worker_pool().drain(20)
    return service.judgments(project).to_dict()["judgments"]


def _approve(service: Obsmem, project: str, query: str) -> None:
    """Search (queues judging), run the judge jobs, resolve every escalated judgment true, groom."""
    service.search(project, query, trust="all")
    for judgment in _judged(service, project):
        if judgment["state"] != "resolved":
            service.resolve_judgment(project, judgment["judgment_id"], True)
    service.groom(project)


def test_a_write_is_never_trusted(service: Obsmem) -> None:
    written = service.save_note("app", "deploy with make ship", situation="when releasing").to_dict()
    assert written["trusted"] is False and written["status"] == "candidate" and written["duplicate"] is False
    again = service.save_note("app", "deploy with make ship", situation="when releasing").to_dict()
    assert again["id"] == written["id"] and again["duplicate"] is True and again["trusted"] is False
    assert service.notes("app", status="trusted").notes == []
    assert [note.id for note in service.notes("app", status="candidate").notes] == [written["id"]]


def test_default_search_never_returns_a_candidate_and_all_marks_it(service: Obsmem) -> None:
    service.save_note("app", "deploy with make ship")
    assert service.search("app", "deploy").hits == []
    hits = service.search("app", "deploy", trust="all").to_dict()["hits"]
    assert [(hit["kind"], hit["trusted"], hit["status"]) for hit in hits] == [("note", False, "candidate")]
    with pytest.raises(ValidationFailed) as caught:
        service.search("app", "deploy", trust="everything")
    assert caught.value.field == "trust"


def test_trusted_notes_come_back_as_hits_of_kind_note_beside_memories(service: Obsmem) -> None:
    service.append_events("app", "s1", [{"role": "user", "content": "ship it"}])
    service.add_observations(
        "app",
        [
            {
                "session_id": "s1",
                "content": "deploy failed on Friday",
                "timestamp": "2026-01-01 10:00",
                "source_refs": [1],
            }
        ],
    )
    service.save_note("app", "deploy with make ship", situation="when releasing")
    _approve(service, "app", "deploy")
    hits = service.search("app", "deploy").to_dict()["hits"]
    assert [hit["kind"] for hit in hits] == ["note", "observation"]  # newest first: the note was written now
    assert hits[0]["trusted"] is True and hits[0]["situation"] == "when releasing"
    assert service.search("app", "deploy", session_id="s1").to_dict()["hits"][0]["kind"] == "observation"


def test_forget_hides_a_note_at_once(service: Obsmem) -> None:
    note = service.save_note("app", "use the staging token rotation script").note
    _approve(service, "app", "rotation")
    assert [hit.memory_id for hit in service.search("app", "rotation").hits] == [note.note_id]
    assert service.forget_note("app", note.id).status == "forgotten"
    assert service.search("app", "rotation").hits == []
    assert service.search("app", "rotation", trust="all").hits == []
    entries = [entry["entry"] for entry in _ledger(service, "app", note.note_id)]
    assert entries == ["judged", "resolved", "promoted", "forgotten"]
    with pytest.raises(ObsmemError) as caught:
        service.update_note("app", note.id, "changed")
    assert caught.value.code == "note_forgotten"
    assert "save the new text" in caught.value.message  # what to do instead


def test_a_forgotten_note_saved_again_earns_trust_anew(service: Obsmem) -> None:
    note = service.save_note("app", "rotate the staging token monthly").note
    _approve(service, "app", "staging token")
    service.forget_note("app", note.id)
    again = service.save_note("app", "rotate the staging token monthly").to_dict()
    assert (again["id"], again["status"], again["trusted"], again["duplicate"]) == (note.id, "candidate", False, True)
    # The judgment resolved true before the forget does not promote the note of its new life.
    assert service.groom("app").to_dict()["promoted"] == []
    assert service.search("app", "staging token").hits == []
    entries = [entry["entry"] for entry in _ledger(service, "app", note.note_id)]
    assert entries == ["judged", "resolved", "promoted", "forgotten", "resaved"]
    # A new judgment (the old one no longer counts as pending) and its resolution promote it once more.
    _approve(service, "app", "staging token")
    assert [hit.memory_id for hit in service.search("app", "staging token").hits] == [note.note_id]
    assert service.groom("app").to_dict()["promoted"] == []
    entries = [entry["entry"] for entry in _ledger(service, "app", note.note_id)]
    assert entries == ["judged", "resolved", "promoted", "forgotten", "resaved", "judged", "resolved", "promoted"]
    judgments = {entry["judgment_id"] for entry in _ledger(service, "app", note.note_id) if entry["judgment_id"]}
    assert len(judgments) == 2


def test_a_question_left_open_before_a_forget_does_not_block_the_new_life(service: Obsmem) -> None:
    note = service.save_note("app", "the cache warms at nine").note
    service.search("app", "cache warms", trust="all")
    [first] = _judged(service, "app")
    service.forget_note("app", note.id)
    service.save_note("app", "the cache warms at nine")
    service.search("app", "cache warms", trust="all")
    judgments = _judged(service, "app")
    assert len(judgments) == 2 and all(judgment["state"] == "escalated" for judgment in judgments)
    service.resolve_judgment("app", first["judgment_id"], True)  # the old life's answer
    assert service.groom("app").to_dict()["promoted"] == []
    [current] = [judgment for judgment in judgments if judgment["judgment_id"] != first["judgment_id"]]
    service.resolve_judgment("app", current["judgment_id"], True)
    assert [item["id"] for item in service.groom("app").to_dict()["promoted"]] == [note.id]


def test_saving_a_trusted_note_again_answers_unchanged_never_trusted(service: Obsmem) -> None:
    note = service.save_note("app", "ship on Thursdays").note
    _approve(service, "app", "Thursdays")
    again = service.save_note("app", "ship on Thursdays").to_dict()
    assert (again["id"], again["trusted"], again["duplicate"]) == (note.id, False, True)
    assert (again["status"], again["note_status"]) == ("unchanged", "trusted")
    assert service.notes("app", status="trusted").notes[0].note_id == note.note_id  # left as it was


def test_user_tier_judgments_are_mirrored_into_the_projects_ledger(service: Obsmem) -> None:
    service.save_note("app", "commit messages cite the ticket")  # the project first: a user-tier write needs it
    note = service.save_note("app", "I like short commit messages", tier="user").note
    service.search("app", "commit messages", trust="all")
    judgments = {judgment["note_id"]: judgment for judgment in _judged(service, "app")}
    user_judgment = judgments[note.id]["judgment_id"]
    service.resolve_judgment("app", user_judgment, True)
    with service.database("app").read() as conn:
        mirrored = [entry for entry in ledger_entries(conn, note.note_id)]
    assert [(entry["entry"], entry["tier"], entry["judgment_id"]) for entry in mirrored] == [
        ("judged", "user", user_judgment),
        ("resolved", "user", user_judgment),
    ]
    assert mirrored[1]["outcome"] == 1
    # The judgment row stays in the user tier: calibration per tier is unchanged.
    assert service.calibrate_trust("app", tier="user").to_dict()["sample"] == 0  # the human judge gives no p
    assert [judgment.judgment_id for judgment in service.judgments("app", state="resolved").judgments] == [
        user_judgment
    ]
    with service.database("app").read() as conn:
        assert conn.execute("SELECT count(*) FROM judgments WHERE judgment_id = ?", (user_judgment,)).fetchone()[0] == 0


def _ledger(service: Obsmem, project: str, note_id: str) -> list[dict[str, Any]]:
    with service.database(project).read() as conn:
        return ledger_entries(conn, note_id)


def test_an_update_supersedes_only_when_it_is_promoted(service: Obsmem) -> None:
    original = service.save_note("app", "run tests with make check").note
    _approve(service, "app", "make check")
    update = service.update_note("app", original.id, "run tests with make test").to_dict()
    assert update["trusted"] is False and update["supersedes"] == original.id
    # Until promoted, the original stays trusted and the update is only a candidate.
    assert [hit.content for hit in service.search("app", "run tests").hits] == ["run tests with make check"]
    everything = service.search("app", "run tests", trust="all").to_dict()["hits"]
    assert sorted((hit["content"], hit["trusted"]) for hit in everything) == [
        ("run tests with make check", True),
        ("run tests with make test", False),
    ]
    _approve(service, "app", "make test")
    assert [hit.content for hit in service.search("app", "run tests").hits] == ["run tests with make test"]
    statuses = {note.content: note.status for note in service.notes("app").notes}
    assert statuses == {"run tests with make check": "superseded", "run tests with make test": "trusted"}
    assert [entry["entry"] for entry in _ledger(service, "app", original.note_id)][-1] == "superseded"


def test_two_updates_of_one_note_never_both_become_trusted(service: Obsmem) -> None:
    original = service.save_note("app", "release with the old script").note
    _approve(service, "app", "old script")
    first = service.update_note("app", original.id, "release with make ship").note
    second = service.update_note("app", original.id, "release with the ansible playbook").note
    _approve(service, "app", "make ship")
    _approve(service, "app", "ansible playbook")
    # The second promotion supersedes the head of the chain (the first update), not the original again.
    statuses = {note.id: (note.status, note.to_dict()["superseded_by"]) for note in service.notes("app").notes}
    assert statuses == {
        original.id: ("superseded", first.id),
        first.id: ("superseded", second.id),
        second.id: ("trusted", None),
    }
    assert [hit.content for hit in service.search("app", "release").hits] == ["release with the ansible playbook"]
    assert [entry["entry"] for entry in _ledger(service, "app", first.note_id)][-1] == "superseded"


def test_updating_a_superseded_note_is_refused_naming_the_current_one(service: Obsmem) -> None:
    original = service.save_note("app", "lint with flake8").note
    _approve(service, "app", "flake8")
    replacement = service.update_note("app", original.id, "lint with ruff").note
    _approve(service, "app", "ruff")
    with pytest.raises(ObsmemError) as caught:
        service.update_note("app", original.id, "lint with pylint")
    assert caught.value.code == "note_superseded" and caught.value.status == 409
    assert replacement.id in caught.value.message and "lint" not in caught.value.message
    assert {note.content for note in service.notes("app").notes} == {"lint with flake8", "lint with ruff"}


def test_the_trust_version_reads_the_ledger_alone(service: Obsmem) -> None:
    """It is read on every model request of a pydantic-ai session: one step down the ledger's key, no scan
    of the judgments; every step that changes the trust state still moves it."""
    note = service.save_note("app", "deploy with make ship").note
    versions = [service.trust.version("app", None)]
    with service.database("app").write() as conn:
        record_judgment(conn, "j0000000000000001", note.note_id, "deploy", "human", None, "escalate", None)
    versions.append(service.trust.version("app", None))
    service.resolve_judgment("app", "j0000000000000001", True)
    versions.append(service.trust.version("app", None))
    service.groom("app")
    versions.append(service.trust.version("app", None))
    assert len(set(versions)) == 4
    read: set[str] = set()

    def watch(operation: int, table: str | None, *_: object) -> int:
        if operation == apsw.SQLITE_READ and table:
            read.add(table)
        return apsw.SQLITE_OK

    with service.database("app").read() as conn:
        conn.authorizer = watch
        try:
            trust_version(conn)
        finally:
            conn.authorizer = None
    assert read == {"trust_ledger"}


def test_groom_promotes_at_most_fifty_per_pass_each_in_the_ledger(service: Obsmem) -> None:
    notes = [service.save_note("app", f"fact number {n}").note for n in range(60)]
    db = service.database("app")
    with db.write() as conn:
        for n, note in enumerate(notes):
            record_judgment(conn, f"j{n:016x}", note.note_id, "fact", "human", None, "escalate", None)
    for n in range(60):
        service.resolve_judgment("app", f"j{n:016x}", True)
    first = service.groom("app").to_dict()
    assert len(first["promoted"]) == 50
    second = service.groom("app").to_dict()
    assert len(second["promoted"]) == 10
    assert service.groom("app").to_dict()["promoted"] == []
    with db.read() as conn:
        promoted = [entry for entry in ledger_entries(conn) if entry["entry"] == "promoted"]
    assert len(promoted) == 60 and len({entry["note_id"] for entry in promoted}) == 60


def test_a_missing_inbox_is_a_cold_start_not_an_error(service: Obsmem) -> None:
    service.append_events("app", "s1", [{"role": "user", "content": "hello"}])
    assert service.groom("app").to_dict() == {"promoted": [], "escalated": [], "escalated_count": 0}
    assert service.notes("app").notes == [] and service.judgments("app").judgments == []


def test_the_ledger_is_append_only(service: Obsmem) -> None:
    note = service.save_note("app", "a fact").note
    service.forget_note("app", note.id)
    with service.database("app").write() as conn, pytest.raises(apsw.ConstraintError):
        conn.execute("UPDATE trust_ledger SET entry = 'promoted'")
    with service.database("app").write() as conn, pytest.raises(apsw.ConstraintError):
        conn.execute("DELETE FROM trust_ledger")


def test_bad_notes_are_refused_with_the_field_named(service: Obsmem) -> None:
    for content, field in [
        ("", "content"),
        ("two\nlines", "content"),
        ("two\u2028lines", "content"),  # a line separator forges a line of the rendered memory as well
        ("two\x85lines", "content"),
        ("half \ud800 a character", "content"),  # once a UnicodeEncodeError out of redaction
        (7, "content"),
        ("x" * 4001, "content"),
    ]:
        with pytest.raises(ValidationFailed) as caught:
            service.save_note("app", content)
        assert caught.value.field == field
        assert "two" not in caught.value.message
    with pytest.raises(ValidationFailed) as caught:
        service.save_note("app", "fine", situation="when \udfff deploying")
    assert caught.value.field == "situation"
    with pytest.raises(ValidationFailed) as caught:
        service.save_note("app", "fine", tier="team")
    assert caught.value.field == "tier"
    with pytest.raises(NotFound):
        service.forget_note("app", "0" * 12)


def test_the_memory_tool_answers_a_lone_surrogate_with_a_tool_error(service: Obsmem) -> None:
    """A model's JSON may hold an escaped lone surrogate: the agent gets an error text, never an exception."""
    from obsmem.surfaces.tools import run_tool

    for arguments in (
        '{"action": "save", "content": "ok \\ud800"}',
        '{"action": "save", "content": "ok", "situation": "when \\ud800"}',
    ):
        outcome = run_tool(service, "app", "memory", arguments)
        assert outcome.is_error and "is not valid UTF-8 text" in outcome.text, outcome.text
    with pytest.raises(NotFound):  # nothing stored: not even the project was created
        service.notes("app")


def test_secrets_in_a_note_are_redacted_before_they_are_stored(service: Obsmem) -> None:
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    note = service.save_note("app", f"the token is {token}").note
    assert token not in note.content


@pytest.mark.parametrize(
    ("p", "resolved", "decision"),
    [
        (0.95, 0, "escalate"),  # cold start: nothing to calibrate against yet
        (0.95, 2, "escalate"),
        (0.95, 3, "inject"),
        (0.7, 3, "inject"),  # the threshold itself injects
        (0.69, 3, "hold"),
        (None, 10, "escalate"),  # a failed judge call is never a "no"
        (1.5, 10, "escalate"),
        (float("nan"), 10, "escalate"),
    ],
)
def test_decide_injection(p: float | None, resolved: int, decision: str) -> None:
    assert decide_injection(p, resolved, threshold=0.7, min_sample=3) == decision


def test_user_tier_is_shared_by_the_local_users_projects(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path / "data", trust={"judge": {"provider": "human"}})
    with Obsmem(settings) as service:
        service.append_events("one", "s1", [{"role": "user", "content": "x"}])
        service.append_events("two", "s1", [{"role": "user", "content": "x"}])
        service.save_note("one", "I prefer ruff over flake8", tier="user")
        hits = service.search("two", "ruff", trust="all").to_dict()["hits"]
        assert [(hit["tier"], hit["trusted"]) for hit in hits] == [("user", False)]
        assert service.search("two", "ruff", trust="all", user=None).hits == []  # no user tier: not seen


def test_hybrid_search_merges_notes_by_rank_and_keeps_the_memory_order(tmp_path: Path, model_server: Any) -> None:
    from support.semantic_service import add_memories, semantic_settings

    settings = load_settings(
        data_dir=tmp_path / "data",
        semantic=semantic_settings(model_server),
        trust={"judge": {"provider": "none"}},
    )
    with Obsmem(settings) as service:
        add_memories(
            service,
            "app",
            [("2026-01-01 10:00", "login test fails on the clock mock"), ("2026-01-02 10:00", "auth token refresh")],
        )
        service.index("app")
        memories_only = [hit.memory_id for hit in service.search("app", "login clock", mode="hybrid").hits]
        service.save_note("app", "the login clock mock needs freezegun", situation="when testing login")
        hits = service.search("app", "login clock", mode="hybrid", trust="all").to_dict()["hits"]
        assert [hit["memory_id"] for hit in hits if hit["kind"] != "note"] == memories_only
        assert [(hit["kind"], hit["trusted"]) for hit in hits if hit["kind"] == "note"] == [("note", False)]
        assert [hit.memory_id for hit in service.search("app", "login clock", mode="hybrid").hits] == memories_only
        # Situation words count in hybrid mode: a note found only through them.
        found = service.search("app", "testing", mode="hybrid", trust="all").hits
        assert [hit.kind for hit in found].count("note") == 1  # vectors find memories for any query too


def test_hybrid_notes_need_the_querys_content_words_and_never_displace_memories(
    tmp_path: Path, model_server: Any
) -> None:
    from support.semantic_service import add_memories, semantic_settings

    settings = load_settings(
        data_dir=tmp_path / "data",
        semantic=semantic_settings(model_server),
        trust={"judge": {"provider": "none"}},
    )
    query = "what is the retry limit for uploads"
    with Obsmem(settings) as service:
        add_memories(
            service,
            "app",
            [
                ("2026-01-01 10:00", "uploads retry up to five times before the limit error"),
                ("2026-01-02 10:00", "the retry limit for uploads was raised to eight"),
                ("2026-01-03 10:00", "auth token refresh moved to the gateway"),
            ],
        )
        service.index("app")
        memories_only = [hit.memory_id for hit in service.search("app", query, mode="hybrid").hits]
        raining = service.save_note("app", "it is raining in the office").note  # the query's stopwords alone
        one_word = service.save_note("app", "the deploy limit is two a day").note  # one content word of three
        partial = service.save_note("app", "staging retry limit is three").note  # two of three
        full = service.save_note("app", "retry limit for uploads is eight since March").note
        hits = service.search("app", query, mode="hybrid", trust="all").hits
        ids = [hit.memory_id for hit in hits]
        assert raining.note_id not in ids and one_word.note_id not in ids
        assert [i for i in ids if i in (partial.note_id, full.note_id)] == [full.note_id, partial.note_id]
        assert [i for i in ids if i not in (partial.note_id, full.note_id)] == memories_only  # order kept
        assert ids[0] == memories_only[0]  # the best memory stays first; a full match may stand beside it
        # A note with half the words comes after every memory the search returned.
        assert ids.index(partial.note_id) > max(ids.index(memory) for memory in memories_only)


_TEXT = st.text(alphabet='aAbB%_ "xé', min_size=1, max_size=12).filter(lambda text: text.strip() != "")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    contents=st.lists(_TEXT, min_size=1, max_size=8, unique_by=str.strip),
    needle=_TEXT,
    limit=st.integers(min_value=1, max_value=10),
    probe=st.sampled_from([1, 3, 200]),
)
def test_exact_note_search_matches_a_like_scan(
    tmp_path_factory: pytest.TempPathFactory, contents: list[str], needle: str, limit: int, probe: int
) -> None:
    """Both plans (the trigram index for rare needles of 3+ characters, the walk along the date index for
    the others; ``probe`` moves the line between them) answer what ASCII-case-insensitive substring
    matching answers, % and _ literal, newest first."""
    data = tmp_path_factory.mktemp("exact")
    with (
        pytest.MonkeyPatch.context() as patch,
        Obsmem(load_settings(data_dir=data, trust={"judge": {"provider": "none"}})) as service,
    ):
        patch.setattr(notes_module, "PROBE_MATCHES", probe)
        for content in contents:
            service.save_note("app", content)
        found = [hit.content for hit in service.search("app", needle, trust="all", limit=limit).hits]

    def ascii_lower(text: str) -> str:
        return "".join(char.lower() if char.isascii() else char for char in text)

    newest_first = [content.strip() for content in reversed(contents)]
    expected = [content for content in newest_first if ascii_lower(needle.strip()) in ascii_lower(content)]
    assert found == expected[:limit]


def test_workers_groom_on_their_housekeeping_schedule(service: Obsmem) -> None:
    note = service.save_note("app", "scheduled fact").note
    user_note = service.save_note("app", "scheduled user fact", tier="user").note
    service.search("app", "scheduled", trust="all")
    for judgment in _judged(service, "app"):
        service.resolve_judgment("app", judgment["judgment_id"], True)
    pool = service.worker_pool()
    pool.housekeep()  # what the housekeeping scheduler runs every jobs.housekeeping_seconds
    statuses = {item.note_id: item.status for item in service.notes("app").notes}
    assert statuses == {note.note_id: "trusted", user_note.note_id: "trusted"}
    service.save_note("app", "later fact")
    service.search("app", "later fact")
    for judgment in _judged(service, "app"):
        if judgment["state"] != "resolved":
            service.resolve_judgment("app", judgment["judgment_id"], True)
    pool.housekeep()  # within trust.groom_seconds of the last pass: nothing runs yet
    assert [item.status for item in service.notes("app", status="candidate").notes] == ["candidate"]


def test_recall_of_a_note_id_shows_the_note_and_its_history(service: Obsmem) -> None:
    from obsmem.surfaces.tools import run_tool

    note = service.save_note("app", "rotate the deploy key monthly", situation="when releasing").note
    _approve(service, "app", "deploy key")
    [hit] = service.search("app", "deploy key").to_dict()["hits"]
    recalled = service.recall("app", hit["id"]).to_dict()
    assert recalled["memory"]["kind"] == "note" and recalled["memory"]["id"] == note.id
    assert (recalled["memory"]["tier"], recalled["memory"]["status"], recalled["memory"]["trusted"]) == (
        "project",
        "trusted",
        True,
    )
    assert [step["entry"] for step in recalled["history"]] == ["judged", "resolved", "promoted"]
    assert [judgment["outcome"] for judgment in recalled["judgments"]] == [True]
    assert "cites no conversation events" in recalled["provenance"]
    # As the tool descriptions say: a hit's id recalled through the agent tool, with the session it gives.
    outcome = run_tool(service, "app", "recall", {"id": hit["id"], "session_id": "s1"}, session_id="s1")
    assert outcome.result is not None and outcome.result["memory"]["id"] == note.id
    # A user-tier note is found for its owner alone.
    mine = service.save_note("app", "I like small diffs", tier="user").note
    assert service.recall("app", mine.id).to_dict()["memory"]["tier"] == "user"
    with pytest.raises(NotFound):
        service.recall("app", mine.id, user=None)


def test_listings_say_when_they_are_cut_and_groom_lists_escalations_bounded(service: Obsmem) -> None:
    notes = [service.save_note("app", f"fact number {n}").note for n in range(60)]
    listed = service.notes("app", limit=50)
    assert len(listed.notes) == 50 and listed.truncated and listed.to_dict()["truncated"] is True
    assert not service.notes("app", limit=60).truncated and not service.notes("app").truncated
    with pytest.raises(ValidationFailed) as caught:
        service.notes("app", limit=0)
    assert caught.value.field == "limit"
    db = service.database("app")
    with db.write() as conn:
        for n, note in enumerate(notes):
            record_judgment(conn, f"j{n:016x}", note.note_id, "fact", "human", None, "escalate", None)
    judged = service.judgments("app", state="escalated", limit=10)
    assert len(judged.judgments) == 10 and judged.truncated
    assert not service.judgments("app", state="escalated").to_dict()["truncated"]
    report = service.groom("app").to_dict()
    assert len(report["escalated"]) == 50 and report["escalated_count"] == 60


def test_a_resolution_retried_after_its_project_copy_failed_writes_the_copy(service: Obsmem) -> None:
    service.save_note("app", "commit messages cite the ticket")
    note = service.save_note("app", "I like short commit messages", tier="user").note
    user_db = service.trust.stores.user(LOCAL_USER)
    assert user_db is not None
    with user_db.write() as conn:
        record_judgment(conn, "j00000000000000aa", note.note_id, "commit", "human", None, "escalate", None)
        # The user tier committed its resolution; the project's copy was never written (the write failed).
        resolve_judgment(conn, "j00000000000000aa", True)
    again = service.resolve_judgment("app", "j00000000000000aa", True)  # the caller retries, as the error says
    assert again.outcome is True
    with service.database("app").read() as conn:
        copied = [(e["entry"], e["tier"]) for e in ledger_entries(conn, note.note_id)]
    assert copied == [("resolved", "user")]
