"""The remote capability's tools stay in its project: a model-supplied id never becomes more than one path
segment of the server's URL, so ``recall`` cannot reach another project's memories through ``..``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from obsmem.app import Obsmem
from obsmem.pydantic_ai import ObservationalMemory, ObsmemClient
from obsmem.settings import load_settings
from support.http_server import BETA_NOTES, KEY_ALL, KEYS, bearer, live_server, seed

pytestmark = pytest.mark.timeout(120)

SECRET = "payments key rotates"


def recalling_model(ids: list[str], returns: list[str]) -> FunctionModel:
    """An agent's model that calls ``recall`` with each id in turn, keeping what the tool answered."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns.extend(str(p.content) for p in messages[-1].parts if isinstance(p, ToolReturnPart))
        if len(returns) < len(ids):
            return ModelResponse(parts=[ToolCallPart("recall", {"id": ids[len(returns)]})])
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(respond)


def test_recall_ids_cannot_leave_the_capabilitys_project(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Obsmem(load_settings(data_dir=data)) as service:
        (other_id,) = seed(service, "other", BETA_NOTES)
    hostile = [
        f"../../other/memories/{other_id}",
        f"{other_id[:12]}/../../../other/memories/{other_id}",
        f"..%2F..%2Fother%2Fmemories%2F{other_id}",
        f"{other_id}?session_id=s1",
        f"{other_id}#fragment",
    ]
    returns: list[str] = []
    with live_server(data, keys=KEYS) as base:
        # What the server itself answers for such a path: the other project's memory, so only the
        # capability's checks stand between a model's id and another project.
        direct = httpx.get(f"{base}/v1/projects/p/memories/../../other/memories/{other_id}", headers=bearer(KEY_ALL))
        client = ObsmemClient(base, api_key=KEY_ALL)
        om = ObservationalMemory(client, project="p", session_id="s1")
        # The run's first request appends its prompt before the model is called: project p exists by then.
        asyncio.run(Agent(recalling_model([*hostile, other_id], returns), capabilities=[om]).run("recall"))
        om.close()
        client.close()

    assert direct.status_code == 200 and SECRET in direct.text
    assert len(returns) == len(hostile) + 1
    assert not [text for text in returns if SECRET in text]
    # Each hostile id is refused by the id rules, with the same error text as the embedded tool.
    assert all(text.startswith("invalid_id: id must be 12 to 64 lowercase hex") for text in returns[:-1])
    # A well-formed id of another project's memory is looked up in this project only: not found.
    assert returns[-1].startswith("not_found: no memory with id")
    assert "other" not in json.dumps(returns)
