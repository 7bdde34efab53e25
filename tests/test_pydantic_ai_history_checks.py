"""A history the session does not hold is refused before the model is called, and a refusal is not for good.

The capability checks a run's history against the stored session whenever the history is not the one it
saw last (another run's, a fresh one). These tests pin the two ways that check could be skipped or stick:
a fresh run on a capability that already appended a longer history, and a run that follows the refusal's
own advice (pass the earlier runs' messages as ``message_history``) on the capability that refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from obsmem.app import Obsmem
from obsmem.errors import SeqConflict
from obsmem.pydantic_ai import ObservationalMemory
from obsmem.settings import load_settings
from support.pydantic_ai_runs import WINDOW, coding_agent, history_events, run_turns, stored_events
from support.pydantic_ai_session import SETTINGS
from support.pydantic_ai_stages import CodingAgent

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[Obsmem]:
    service = Obsmem(load_settings(data_dir=tmp_path / "data", **SETTINGS))
    yield service
    service.close()


def _capability(memory: Obsmem, session: str = "s1") -> ObservationalMemory:
    return ObservationalMemory(memory, project="p", session_id=session, context_window=WINDOW, tools=False)


def test_a_fresh_run_on_a_used_capability_is_refused_before_the_model_is_called(memory: Obsmem) -> None:
    om = _capability(memory)
    model = CodingAgent()
    agent = coding_agent(om, model)

    async def scenario() -> None:
        await run_turns(agent, om, range(1, 3), [])
        before = len(model.requests)
        with pytest.raises(SeqConflict, match="message_history"):
            await agent.run("turn 1: something else entirely")  # no message_history: a shorter, other history
        assert len(model.requests) == before  # the model never saw it

    asyncio.run(scenario())
    om.close()
    assert len(stored_events(memory)) == 9  # a system prompt and two turns: nothing of the fresh run's


def test_following_the_refusals_advice_works_on_the_same_capability(memory: Obsmem) -> None:
    first = _capability(memory)
    agent = coding_agent(first, CodingAgent())

    async def scenario() -> None:
        history = await run_turns(agent, first, range(1, 3), [])
        other = _capability(memory)
        other_model = CodingAgent()
        other_agent = coding_agent(other, other_model)
        with pytest.raises(SeqConflict, match="message_history"):
            await other_agent.run("turn 1: something else entirely")
        # As the error says: the earlier runs' messages as message_history, on the capability that refused.
        result = await other_agent.run("turn 3: and now the next one", message_history=history)
        assert other_model.requests  # this time the model was asked
        await other.flush(30)
        assert stored_events(memory) == history_events(result.all_messages())
        other.close()

    asyncio.run(scenario())
    first.close()


def test_a_history_that_conflicts_at_a_stored_seq_does_not_stick(memory: Obsmem) -> None:
    first = _capability(memory)
    agent = coding_agent(first, CodingAgent())
    elsewhere = _capability(memory, "s2")

    async def scenario() -> None:
        history = await run_turns(agent, first, range(1, 3), [])
        # Another conversation, longer than the stored one: it differs at a seq the session holds.
        stranger = await run_turns(coding_agent(elsewhere, CodingAgent()), elsewhere, range(11, 14), [])
        other = _capability(memory)
        other_agent = coding_agent(other, CodingAgent())
        with pytest.raises(SeqConflict, match="different messages"):
            await other_agent.run("turn 20: more", message_history=stranger)
        result = await other_agent.run("turn 3: next", message_history=history)
        await other.flush(30)
        assert stored_events(memory) == history_events(result.all_messages())
        other.close()

    asyncio.run(scenario())
    first.close()
    elsewhere.close()
