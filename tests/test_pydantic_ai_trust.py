"""The pydantic-ai capability and agent-written notes: the ``memory`` tool, groom at session start, and the
untrusted-notes section in the memory that replaces observed messages.

pydantic-ai's ``FunctionModel`` plays the agent's model (and, where memory must be observed, the Observer);
everything else is real: the data directory, the judge on loopback, ``obsmem serve`` for the remote cases.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from obsmem.app import Obsmem
from obsmem.pydantic_ai import ObservationalMemory, ObsmemClient, OMEvent
from obsmem.settings import load_settings
from obsmem.surfaces.tool_memory import memory_tool_definition
from obsmem.surfaces.tools import execute_tool
from support.http_server import KEY_ALL, KEYS, bearer, live_server
from support.judge_server import JudgeServer
from support.pydantic_ai_runs import WINDOW, coding_agent, run_turns
from support.pydantic_ai_session import SETTINGS
from support.pydantic_ai_stages import CodingAgent, observer_model

pytestmark = pytest.mark.timeout(300)

HUMAN_JUDGE = {"judge": {"provider": "human"}}
Step = Callable[[list[str]], tuple[str, dict[str, Any]]]


@dataclass
class ToolCaller:
    """The agent's model: one tool call per step (each may read the answers so far), then ``done``."""

    steps: list[Step]
    answers: list[str] = field(default_factory=list)
    tool_names: list[str] = field(default_factory=list)
    memory_description: str = ""

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.tool_names = [tool.name for tool in info.function_tools]
        self.memory_description = next((t.description or "" for t in info.function_tools if t.name == "memory"), "")
        last = messages[-1]
        if isinstance(last, ModelRequest):
            self.answers += [str(p.content) for p in last.parts if isinstance(p, ToolReturnPart)]
        if len(self.answers) >= len(self.steps):
            return ModelResponse(parts=[TextPart("done")])
        name, args = self.steps[len(self.answers)](self.answers)
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"call{len(self.answers)}")])


def call(name: str, **args: Any) -> Step:
    return lambda answers: (name, args)


def on_saved(action: str, **args: Any) -> Step:
    """A ``memory`` call on the note the first step saved."""
    return lambda answers: ("memory", {"action": action, "id": json.loads(answers[0])["id"], **args})


# Calls the model gets wrong: each answer must read exactly as the agent tools' (and MCP's) do.
MISTAKES: list[dict[str, Any]] = [
    {"action": "update"},
    {"action": "update", "id": "zz", "content": "x"},
    {"action": "update", "id": "0123456789ab", "content": "x"},
    {"action": "save", "content": "   "},
    {"action": "save", "content": "a note", "id": "0123456789ab"},
    {"action": "forget", "id": "0123456789ab", "tier": "user"},
    {"action": "remember", "content": "x"},
]

WRITES: list[Step] = [
    call("memory", action="save", content="deploy with make ship", situation="when releasing"),
    on_saved("update", content="deploy with make release", situation="when releasing"),
    call("memory_search", query="deploy", trust="all"),
    call("memory_search", query="deploy"),
    on_saved("forget"),
    *(call("memory", **mistake) for mistake in MISTAKES),
]


def check_writes(model: ToolCaller, notes: dict[str, str]) -> None:
    """What the agent saw, and (``notes``: content -> status) what the store holds afterwards."""
    saved, updated, everything, trusted, forgotten = (json.loads(a) for a in model.answers[:5])
    assert saved["trusted"] is False and saved["status"] == "candidate" and saved["duplicate"] is False
    assert updated["trusted"] is False and updated["supersedes"] == saved["id"] and updated["status"] == "candidate"
    hits = [(hit["kind"], hit["trusted"], hit["content"]) for hit in everything["hits"]]
    assert sorted(hits) == [("note", False, "deploy with make release"), ("note", False, "deploy with make ship")]
    assert trusted["hits"] == []  # candidates only with trust "all"
    assert forgotten == {"id": saved["id"], "memory_id": saved["memory_id"], "status": "forgotten", "trusted": False}
    assert notes == {"deploy with make ship": "forgotten", "deploy with make release": "candidate"}
    assert {"memory_search", "recall", "memory"} <= set(model.tool_names)
    assert model.memory_description == memory_tool_definition()["function"]["description"]


def mcp_answers(tmp_path: Path) -> list[str]:
    """The mistakes' answers from the agent tools' runner (the one MCP serves), over a fresh data directory."""
    with Obsmem(load_settings(data_dir=tmp_path / "reference", trust=HUMAN_JUDGE)) as reference:
        reference.save_note("p", "make the project exist")
        return [execute_tool(reference, "p", "memory", mistake) for mistake in MISTAKES]


async def wait_for(events: list[OMEvent], kind: str, timeout: float = 20.0) -> OMEvent:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [event for event in events if event.type == kind]
        if found:
            return found[0]
        await asyncio.sleep(0.02)
    raise AssertionError(f"no {kind} event within {timeout} s: {[event.type for event in events]}")


def answering_agent(om: ObservationalMemory) -> Agent[None, str]:
    return Agent(FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("ok")])), capabilities=[om])


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Obsmem]:
    with Obsmem(load_settings(data_dir=tmp_path / "data", trust=HUMAN_JUDGE)) as memory:
        yield memory


def resolved_note(service: Obsmem, content: str = "run tests with make check") -> str:
    """A candidate whose judgment a person resolved true: the next groom pass promotes it. Its display id."""
    note = service.save_note("p", content).note
    service.search("p", content, trust="all")
    service.trust.dispatcher.flush()
    assert service.worker_pool().drain(30)
    [judgment] = service.judgments("p").judgments
    service.resolve_judgment("p", judgment.judgment_id, True)
    return note.id


# -- the memory tool -----------------------------------------------------------------------------------


def test_the_agent_saves_updates_and_forgets_notes_with_the_memory_tool(service: Obsmem, tmp_path: Path) -> None:
    om = ObservationalMemory(service, project="p", session_id="s1", start_workers=False)
    model = ToolCaller(WRITES)
    result = asyncio.run(Agent(FunctionModel(model), capabilities=[om]).run("remember how we deploy"))
    om.close()

    assert result.output == "done" and len(model.answers) == len(WRITES)
    check_writes(model, {note.content: note.status for note in service.notes("p").notes})
    assert model.answers[5:] == mcp_answers(tmp_path)
    assert model.answers[5] == "invalid_arguments: update needs the note's id"
    assert model.answers[6] == "invalid_id: id must be a note id: 12 to 64 lowercase hex characters"
    assert model.answers[7] == "not_found: note 0123456789ab does not exist"
    assert model.answers[8] == "invalid_request: content must not be empty"


# -- groom at session start ----------------------------------------------------------------------------


def test_a_session_start_grooms_once_in_the_background_and_reports_the_promotion(service: Obsmem) -> None:
    note_id = resolved_note(service)
    events: list[OMEvent] = []
    om = ObservationalMemory(service, project="p", session_id="s1", start_workers=False, event_handler=events.append)
    agent = answering_agent(om)

    async def scenario() -> OMEvent:
        first = await agent.run("hello")
        groomed = await wait_for(events, "om_groom")
        await agent.run("again", message_history=first.all_messages())
        return groomed

    groomed = asyncio.run(scenario())
    om.close()
    assert groomed.data["promoted"] == 1 and groomed.data["promoted_ids"] == [note_id]
    assert groomed.data["escalated"] == 0 and groomed.data["cold_start"] is False
    assert [event.type for event in events].count("om_groom") == 1  # once per session, not per run
    assert om.last_groom is not None and om.last_groom["promoted"][0]["id"] == note_id
    [note] = service.notes("p").notes
    assert note.status == "trusted"
    assert [hit.content for hit in service.search("p", "make check").hits] == ["run tests with make check"]


def test_a_project_without_an_inbox_is_a_cold_start(service: Obsmem) -> None:
    events: list[OMEvent] = []
    om = ObservationalMemory(service, project="new", session_id="s1", start_workers=False, event_handler=events.append)
    # The groom pass runs in the background beside the run's first append, which creates the project: hold
    # the append until the pass is over, so it meets the project as it was at the session's start.
    append = om.backend.append

    def append_after_the_groom_pass(batch: list[dict[str, Any]]) -> None:
        assert om._groom is not None
        om._groom.result(timeout=20)
        append(batch)

    om.backend.append = append_after_the_groom_pass  # type: ignore[method-assign]

    async def scenario() -> OMEvent:
        await answering_agent(om).run("hello")
        return await wait_for(events, "om_groom")

    groomed = asyncio.run(scenario())
    om.close()
    assert groomed.data | {"duration_ms": 0} == {
        "promoted": 0,
        "escalated": 0,
        "promoted_ids": [],
        "cold_start": True,
        "duration_ms": 0,
    }
    assert "om_groom_failed" not in {event.type for event in events}


def test_a_failing_groom_pass_is_an_event_and_never_fails_the_run(service: Obsmem) -> None:
    resolved_note(service)
    with service.database("p").write() as conn:  # the disk refuses every promotion
        conn.execute(
            "CREATE TRIGGER refuse_promotion BEFORE UPDATE OF status ON notes"
            " BEGIN SELECT RAISE(ABORT, 'promotion refused'); END"
        )
    events: list[OMEvent] = []
    om = ObservationalMemory(service, project="p", session_id="s1", start_workers=False, event_handler=events.append)
    agent = answering_agent(om)

    async def scenario() -> tuple[str, OMEvent]:
        result = await agent.run("hello")
        return result.output, await wait_for(events, "om_groom_failed")

    output, failed = asyncio.run(scenario())
    om.close()
    assert output == "ok"
    assert failed.data["error"] == "internal_error" and failed.data["message"] == "ConstraintError"
    assert "om_groom" not in {event.type for event in events}
    [note] = service.notes("p").notes
    assert note.status == "candidate"  # nothing half-applied: the next pass tries again


# -- untrusted notes in the memory that replaces observed messages ---------------------------------------


def test_the_replacement_carries_the_untrusted_notes_as_obsmem_renders_them(tmp_path: Path) -> None:
    with JudgeServer(0.9) as judge:
        trust = {"judge": {"provider": "http", "base_url": judge.base_url}}
        service = Obsmem(load_settings(data_dir=tmp_path / "data", trust=trust, **SETTINGS))
        events: list[OMEvent] = []
        om = ObservationalMemory(
            service,
            project="p",
            session_id="s1",
            observer_model=observer_model(),
            context_window=WINDOW,
            include_observations=True,
            event_handler=events.append,
        )
        model = CodingAgent()
        agent = coding_agent(om, model)

        def judged() -> list[dict[str, Any]]:
            service.trust.dispatcher.flush()
            assert service.worker_pool().drain(30)
            return service.judgments("p").to_dict()["judgments"]

        async def scenario() -> None:
            history = await run_turns(agent, om, range(1, 4), [])
            # Three judgments resolved (the cold start), then a candidate the judge finds relevant: injected.
            for n in range(3):
                service.save_note("p", f"cold fact {n}")
            service.search("p", "cold fact", trust="all")
            for judgment in judged():
                service.resolve_judgment("p", judgment["judgment_id"], True)
            service.save_note("p", "the release branch is cut on Mondays", situation="when releasing")
            service.search("p", "release branch", trust="all")
            assert [j["decision"] for j in judged() if j["state"] == "open"] == ["inject"]
            await run_turns(agent, om, range(4, 5), history)

        asyncio.run(scenario())
        om.close()
        rendered = service.memory("p", "s1")
        service.close()

    assert [(item.note.content, item.p) for item in rendered.untrusted_notes] == [
        ("the release branch is cut on Mondays", 0.9)
    ]
    assert '<obsmem-memory section="untrusted-notes">' in rendered.text
    replacements = [
        str(part.content)
        for message in model.requests[-1]
        for part in message.parts
        if isinstance(part, UserPromptPart) and "[obsmem: the first" in str(part.content)
    ]
    # The request was made before the last turn's messages were observed, so its memory is a little shorter;
    # the untrusted section that follows it is the same, after a blank line, as obsmem renders it.
    section = rendered.text[rendered.text.index('<obsmem-memory section="untrusted-notes">') :]
    assert len(replacements) == 1 and replacements[0].endswith("</obsmem-memory>\n\n" + section)
    assert "p=0.90 project: the release branch is cut on Mondays (when: when releasing)" in replacements[0]
    # The opt-in observation payloads carry observations alone: never an untrusted note's line.
    texts = [text for e in events if e.type == "om_observation_end" for text in e.data["observation_texts"]]
    observation_line = re.compile(r"\[[0-9a-f]{12}\] \d{4}-\d\d-\d\d \d\d:\d\d \[\w+\] ")
    assert len(texts) >= 4 and any("word4" in text for text in texts)
    assert [text for text in texts if not observation_line.match(text)] == []
    assert not [text for text in texts if "release branch" in text or "cold fact" in text]


# -- remote: the same through obsmem serve -----------------------------------------------------------------

REMOTE_SETTINGS = "\n".join(
    [
        "[trust.judge]",
        'provider = "human"',
        "[jobs]",
        "poll_seconds = 0.05",
        "housekeeping_seconds = 3600",  # no scheduled groom during the test: the session start's is measured
    ]
)


def resolved_over_http(base: str, content: str) -> str:
    """Save a note, search for it, and resolve its judgment true, all through the HTTP API; its display id."""
    headers = bearer(KEY_ALL)
    saved = httpx.post(f"{base}/v1/projects/p/notes", json={"action": "save", "content": content}, headers=headers)
    httpx.post(f"{base}/v1/projects/p/search", json={"query": content, "trust": "all"}, headers=headers)
    deadline = time.monotonic() + 30
    while not (judgments := httpx.get(f"{base}/v1/projects/p/judgments", headers=headers).json()["judgments"]):
        assert time.monotonic() < deadline, "the server's workers never judged the candidate"
        time.sleep(0.05)
    resolve = f"{base}/v1/projects/p/judgments/{judgments[0]['judgment_id']}/resolve"
    assert httpx.post(resolve, json={"outcome": True}, headers=headers).status_code == 200
    return str(saved.json()["id"])


def test_the_memory_tool_and_groom_through_an_obsmem_server(tmp_path: Path) -> None:
    events: list[OMEvent] = []
    model = ToolCaller(WRITES)
    with live_server(tmp_path / "data", keys=KEYS, extra=REMOTE_SETTINGS) as base:
        note_id = resolved_over_http(base, "run tests with make check")
        client = ObsmemClient(base, api_key=KEY_ALL)
        om = ObservationalMemory(client, project="p", session_id="s1", event_handler=events.append)

        async def scenario() -> OMEvent:
            await Agent(FunctionModel(model), capabilities=[om]).run("remember how we deploy")
            return await wait_for(events, "om_groom")

        groomed = asyncio.run(scenario())
        notes = httpx.get(f"{base}/v1/projects/p/notes", headers=bearer(KEY_ALL)).json()["notes"]
        om.close()
        client.close()

    assert groomed.data["promoted"] == 1 and groomed.data["promoted_ids"] == [note_id]
    statuses = {note["content"]: note["status"] for note in notes}
    assert statuses.pop("run tests with make check") == "trusted"
    check_writes(model, statuses)
    assert model.answers[5:] == mcp_answers(tmp_path)
    # The same note written in process answers the same: ids are the note's content, not where it lives.
    with Obsmem(load_settings(data_dir=tmp_path / "embedded", trust=HUMAN_JUDGE)) as service:
        embedded = execute_tool(service, "p", "memory", WRITES[0]([])[1])
    assert json.loads(embedded) == json.loads(model.answers[0])
