"""The MCP server, driven by the official MCP client over stdio (the module runs as a subprocess)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from obsmem.app import Obsmem
from obsmem.surfaces import mcp_server
from obsmem.surfaces.tools import tool_definitions
from support.http_server import ALPHA_NOTES, seed, settings_for


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    with Obsmem(settings_for(tmp_path)) as service:
        seed(service, "alpha", ALPHA_NOTES)
    return tmp_path / "data"


def stdio(data_dir: Path, *extra: str) -> StdioServerParameters:
    args = ["-m", "obsmem.surfaces.mcp_server", "--data-dir", str(data_dir), "--project", "alpha", *extra]
    # Started from the data directory, as an agent would (from anywhere but a source checkout).
    return StdioServerParameters(command=sys.executable, args=args, env={"HF_HUB_OFFLINE": "1"}, cwd=str(data_dir))


def test_stdio_tools_search_recall_and_errors(data_dir: Path) -> None:
    async def scenario() -> None:
        with anyio.fail_after(60):
            async with Client(stdio(data_dir, "--session-id", "s1")) as client:
                listed = {tool.name: tool for tool in (await client.list_tools()).tools}
                published = {d["function"]["name"]: d["function"] for d in tool_definitions("exact")}
                assert set(listed) == set(published) == {"memory_search", "recall", "memory"}
                for name, tool in listed.items():
                    assert tool.description == published[name]["description"]
                    assert tool.input_schema == published[name]["parameters"]

                found = await client.call_tool("memory_search", {"query": "maptoolarguments"})
                assert not found.is_error
                result = json.loads(found.content[0].text)
                assert [hit["content"] for hit in result["hits"]] == [ALPHA_NOTES[7][2], ALPHA_NOTES[0][2]]
                assert found.structured_content == result

                hit = result["hits"][1]
                recalled = await client.call_tool("recall", {"id": hit["id"]})
                assert not recalled.is_error
                provenance = json.loads(recalled.content[0].text)
                assert provenance["memory"]["memory_id"] == hit["memory_id"]
                assert provenance["sources"][0]["seq"] == 1

                missing = await client.call_tool("recall", {"id": "ffffffffffff"})
                assert missing.is_error
                text = missing.content[0].text
                assert text.startswith("not_found: ") and "session 's1'" in text

                bad = await client.call_tool("memory_search", {"query": "x", "after": "2026-02-30"})
                assert bad.is_error and bad.content[0].text.startswith("invalid_date: ")
                unknown = await client.call_tool("memory_search", {"query": "x", "bogus": True})
                assert unknown.is_error and unknown.content[0].text.startswith("invalid_arguments: ")

    anyio.run(scenario)


def test_stdio_refuses_a_bad_project_name(data_dir: Path) -> None:
    import subprocess

    command = [sys.executable, "-m", "obsmem.surfaces.mcp_server", "--data-dir", str(data_dir), "--project", "../x"]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert finished.returncode == 2
    assert "invalid_project" in finished.stderr


def test_stdio_refuses_a_session_id_that_looks_like_a_secret(data_dir: Path) -> None:
    import subprocess

    secret = "sk-proj-Xq7Lm2Pz9Rt4Vb6Nc8Kd1Fg3Hj5"
    command = [sys.executable, "-m", "obsmem.surfaces.mcp_server", "--data-dir", str(data_dir), "--project", "alpha"]
    command += ["--session-id", secret]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert finished.returncode == 2
    assert "invalid_session" in finished.stderr and "looks like a secret" in finished.stderr
    assert secret not in finished.stderr + finished.stdout


def test_an_unexpected_tool_failure_never_logs_a_secret_from_the_tool_name(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    token = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("an unexpected failure")

    monkeypatch.setattr(mcp_server, "run_tool", broken)
    caplog.set_level(logging.DEBUG, logger="obsmem.mcp")
    with Obsmem(settings_for(data_dir.parent)) as service:
        server = mcp_server.build_server(service, project="alpha")

        async def scenario() -> None:
            with anyio.fail_after(60):
                async with Client(server) as client:
                    result = await client.call_tool(f"tool_{token}", {})
                    assert result.is_error and "internal_error" in result.content[0].text

        anyio.run(scenario)
    assert "failed unexpectedly" in caplog.text
    assert token not in caplog.text and "[REDACTED:github_token]" in caplog.text
