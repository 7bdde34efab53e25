"""Whatever a transcript holds, an import never raises: every record is stored, skipped or reported."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from obsmem.app import Obsmem
from obsmem.settings import load_settings

KEYS = [
    "type", "message", "content", "role", "sessionId", "uuid", "parentUuid", "cwd", "timestamp", "isSidechain",
    "agentId", "isMeta", "subtype", "level", "text", "tool_use_id", "tool_calls", "id", "name", "input", "payload",
    "arguments", "call_id", "output", "toolCalls", "status", "result", "args", "$set", "$rewindTo", "messages",
    "session_id", "seq", "created_at", "tool_name", "tool_args", "summary", "thoughts", "projectHash", "kind",
]  # fmt: skip
VALUES = [
    "user", "assistant", "system", "tool", "message", "tool_use", "tool_result", "text", "thinking", "session_meta",
    "response_item", "function_call", "function_call_output", "compacted", "gemini", "error", "success", "s1", "",
    "2025-01-01T00:00:00Z", "not a date", "/w/robust",
]  # fmt: skip

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.sampled_from(VALUES),
    st.text(max_size=30),
)  # fmt: skip
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS), inner, max_size=6)),
    max_leaves=25,
)
lines = st.one_of(
    st.dictionaries(st.sampled_from(KEYS), documents, max_size=8).map(json.dumps),
    documents.map(json.dumps),
    st.binary(max_size=40).map(lambda raw: raw.decode("latin-1")),
)


@pytest.mark.parametrize("source", ["claude-code", "codex", "openai-chat", "obsmem", "aider", "gemini-cli"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(lines, max_size=12))
def test_random_records_never_break_an_import(
    tmp_path_factory: pytest.TempPathFactory, source: str, records: list[str]
) -> None:
    root = tmp_path_factory.mktemp("robust")
    name = "session-1.jsonl" if source == "gemini-cli" else ".aider.chat.history.md" if source == "aider" else "t.jsonl"
    path = root / "chats" / name
    path.parent.mkdir()
    body = "\n".join(records) + "\n"
    if source == "aider":
        body = "# aider chat started at 2025-01-01 10:00:00\n" + body
    path.write_bytes(body.encode("utf-8", "surrogatepass"))
    with Obsmem(load_settings(data_dir=root / "data")) as memory:
        first = memory.import_transcripts(source, [path], project="robust")
        again = memory.import_transcripts(source, [path], project="robust")
    report: Any = first.files[0]
    assert report.status in ("imported", "failed", "unchanged")
    assert again.added == 0
    assert report.added <= report.events
