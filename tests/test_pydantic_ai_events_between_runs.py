"""Pipeline events reach the capability's handler as they happen, between runs too, until ``close()``.

An embedded Obsmem whose Observer (a pydantic-ai ``FunctionModel``) is held until the agent's run has
returned: the observation ends while no run is in progress, and its events must still arrive without a new
run and without ``flush``. The poller that carries them is one task, polls at its interval (no busy loop) and
is gone after ``close()``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from obsmem.app import Obsmem
from obsmem.pydantic_ai import ObservationalMemory, OMEvent
from obsmem.pydantic_ai.capability import POLLER_TASK_NAME
from obsmem.settings import load_settings
from support.pydantic_ai_runs import WINDOW, coding_agent, session_memory
from support.pydantic_ai_session import SETTINGS
from support.pydantic_ai_stages import CodingAgent, observer

pytestmark = pytest.mark.timeout(120)

POLL_SECONDS = 0.1
WAIT_SECONDS = 20.0


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[Obsmem]:
    service = Obsmem(load_settings(data_dir=tmp_path / "data", **SETTINGS))
    yield service
    service.close()


class HeldObserver:
    """The scripted Observer, answering only once released (bounded: it gives up holding after a while)."""

    def __init__(self) -> None:
        self.called = threading.Event()
        self.release = threading.Event()

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.called.set()
        self.release.wait(WAIT_SECONDS)
        return observer(messages, info)


def pollers() -> list[asyncio.Task[object]]:
    return [task for task in asyncio.all_tasks() if task.get_name() == POLLER_TASK_NAME and not task.done()]


async def until(condition: object, seconds: float = WAIT_SECONDS) -> bool:
    """Wait on the loop (so the poller runs) until ``condition()`` holds or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def test_an_observation_that_ends_after_the_run_reaches_the_handler(memory: Obsmem) -> None:
    handled: list[OMEvent] = []
    held = HeldObserver()
    om = session_memory(
        memory,
        handled,
        observer_model=FunctionModel(held),
        context_window=WINDOW,
        poll_seconds=POLL_SECONDS,
        tools=False,
    )
    agent = coding_agent(om, CodingAgent())

    def ended() -> list[OMEvent]:
        return [e for e in handled if e.type == "om_observation_end"]

    async def scenario() -> tuple[bool, int, bool, int]:
        await agent.run("turn 1: fix the failing test; the code word for turn 1 is word1")
        started = await asyncio.to_thread(held.called.wait, WAIT_SECONDS)
        before_release = len(ended())
        held.release.set()
        arrived = await until(ended)  # no run, no flush: only the poller can deliver it
        running = len(pollers())
        om.close()
        await asyncio.sleep(POLL_SECONDS * 3)
        return started, before_release, arrived, running + 10 * len(pollers())

    started, before_release, arrived, pollers_seen = asyncio.run(scenario())
    assert started, "the run should have started an observation"
    assert before_release == 0  # the observation was still running when the run returned
    assert arrived, "the observation's end did not reach the handler between runs"
    assert {"om_observation_start", "om_buffering_start", "om_buffering_end"} <= {e.type for e in handled}
    assert pollers_seen == 1  # one poller while open, none after close()


def test_the_poller_polls_at_its_interval_between_runs_and_is_one_task(memory: Obsmem) -> None:
    om = ObservationalMemory(memory, project="p", session_id="s1", poll_seconds=POLL_SECONDS, tools=False)
    reads: list[float] = []
    events_after = om.backend.events_after

    def counted(after_id: int, limit: int = 200) -> list[dict[str, object]]:
        reads.append(time.monotonic())
        return events_after(after_id, limit)

    om.backend.events_after = counted  # type: ignore[method-assign]
    agent = coding_agent(om, CodingAgent())

    async def scenario() -> tuple[int, int]:
        history: list[ModelMessage] = []
        for turn in (1, 2):  # two runs on one loop share the one poller
            history = (await agent.run(f"turn {turn}: fix the failing test", message_history=history)).all_messages()
        reads.clear()
        await asyncio.sleep(1.0)
        idle_reads = len(reads)
        tasks = len(pollers())
        om.close()
        return idle_reads, tasks

    idle_reads, tasks = asyncio.run(scenario())
    assert tasks == 1
    # Between runs it keeps polling, about once per interval: ~10 reads in a second, not a busy loop.
    assert 3 <= idle_reads <= 15
