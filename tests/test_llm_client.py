"""The chat client against a real scripted server on loopback: retries, deadlines, keys, parsing, logs."""

from __future__ import annotations

import logging
import time

import pytest

from obsmem.errors import ModelBadResponse, ModelNotConfigured, ModelRejected, ModelTimeout, ModelUnavailable
from obsmem.pipeline import ChatClient
from obsmem.settings import ModelSettings
from support.scripted_chat import Reply, Responder, ScriptedChatServer, error, text, tool_calls

KEY = "sk-test-0123456789abcdefghijklmnop"
PROMPT = "the secret plan is to refactor MapToolArguments"


@pytest.fixture
def script() -> Responder:
    """A model that answers every request with "ok" (the shared ``server`` plays it)."""
    return lambda request: text("ok")


def client_for(server: ScriptedChatServer, **overrides: object) -> ChatClient:
    options: dict[str, object] = {
        "base_url": server.base_url,
        "model_id": "test-model",
        "api_key": KEY,
        "timeout_seconds": 5.0,
        "max_retries": 2,
        "retry_backoff_seconds": 0.01,
    } | overrides
    return ChatClient(ModelSettings(**options), role="observer")  # type: ignore[arg-type]


def ask(client: ChatClient) -> object:
    return client.complete(
        [{"role": "user", "content": PROMPT}],
        tools=[
            {
                "type": "function",
                "function": {"name": "record_observations", "parameters": {"type": "object"}},
            }
        ],
        tool_choice="auto",
    )


def test_tool_calls_are_parsed_and_the_key_is_only_a_bearer_header(server: ScriptedChatServer) -> None:
    server.responder = lambda request: tool_calls(("record_observations", {"observations": []}))
    client = client_for(server)
    reply = ask(client)
    assert reply.tool_calls[0].name == "record_observations"  # type: ignore[attr-defined]
    assert reply.tool_calls[0].arguments == '{"observations": []}'  # type: ignore[attr-defined]
    assert reply.prompt_tokens == 100  # type: ignore[attr-defined]
    (request,) = server.requests
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert KEY not in request.path and KEY.encode() not in request.body
    body = request.json
    assert body["model"] == "test-model" and body["tool_choice"] == "auto" and body["temperature"] == 0.0
    client.close()


def test_no_key_sends_no_authorization(server: ScriptedChatServer) -> None:
    client = client_for(server, api_key=None)
    ask(client)
    assert "authorization" not in server.requests[0].headers


def test_429_and_5xx_are_retried_then_succeed(server: ScriptedChatServer) -> None:
    replies = iter([error(429, retry_after=0.05), error(503), text("fine")])
    server.responder = lambda request: next(replies)
    reply = ask(client_for(server))
    assert reply.content == "fine"  # type: ignore[attr-defined]
    assert len(server.requests) == 3


def test_persistent_500_gives_up_after_bounded_retries(server: ScriptedChatServer) -> None:
    server.responder = lambda request: error(500)
    with pytest.raises(ModelUnavailable) as caught:
        ask(client_for(server, max_retries=2))
    assert len(server.requests) == 3
    assert caught.value.code == "model_unavailable" and "HTTP 500" in caught.value.message


def test_other_4xx_and_redirects_are_not_retried(server: ScriptedChatServer) -> None:
    server.responder = lambda request: error(401)
    with pytest.raises(ModelRejected):
        ask(client_for(server))
    assert len(server.requests) == 1
    server.responder = lambda request: Reply(status=307, body=b"", headers={"Location": "http://example.com/v1"})
    with pytest.raises(ModelRejected):
        ask(client_for(server))
    assert len(server.requests) == 2


def test_a_hanging_endpoint_is_cut_off_by_the_deadline(server: ScriptedChatServer) -> None:
    server.responder = lambda request: Reply(hang=True)
    started = time.monotonic()
    with pytest.raises(ModelTimeout):
        ask(client_for(server, timeout_seconds=1.0))
    assert time.monotonic() - started < 2.5


def test_a_dripping_body_is_cut_off_by_the_deadline(server: ScriptedChatServer) -> None:
    server.responder = lambda request: Reply(body=b'{"choices": []}' * 20, drip_seconds=0.05)
    started = time.monotonic()
    with pytest.raises(ModelTimeout):
        ask(client_for(server, timeout_seconds=1.0))
    assert time.monotonic() - started < 2.5


def test_retry_after_longer_than_the_deadline_fails_at_once(server: ScriptedChatServer) -> None:
    server.responder = lambda request: error(429, retry_after=30)
    started = time.monotonic()
    with pytest.raises(ModelUnavailable):
        ask(client_for(server, timeout_seconds=2.0))
    assert time.monotonic() - started < 1.0
    assert len(server.requests) == 1


def test_slow_reply_within_the_deadline_succeeds(server: ScriptedChatServer) -> None:
    server.responder = lambda request: Reply(body=text("late").body, delay=0.5)
    assert ask(client_for(server, timeout_seconds=3.0)).content == "late"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b'{"choices": []}',
        b'{"choices": [{"message": 3}]}',
        b'{"choices": [{"message": {"tool_calls": [1]}}]}',
        b'{"choices": [{"message": {"tool_calls": 5}}]}',  # once a TypeError (internal_error)
        b'{"choices": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",  # once a RecursionError
    ],
)
def test_malformed_replies_are_bad_responses(server: ScriptedChatServer, body: bytes) -> None:
    server.responder = lambda request: Reply(body=body)
    with pytest.raises(ModelBadResponse):
        ask(client_for(server))


def test_unreachable_endpoint_is_unavailable() -> None:
    with ScriptedChatServer() as gone:
        url = gone.base_url
    client = ChatClient(
        ModelSettings(base_url=url, model_id="m", max_retries=1, retry_backoff_seconds=0.01, timeout_seconds=3),
        role="observer",
    )
    with pytest.raises(ModelUnavailable) as caught:
        ask(client)
    assert "unreachable" in caught.value.message


def test_missing_model_is_a_configuration_problem() -> None:
    with pytest.raises(ModelNotConfigured):
        ChatClient(ModelSettings(), role="observer")


def test_logs_and_errors_never_hold_prompt_reply_or_key(
    server: ScriptedChatServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.responder = lambda request: text("reply text about MapToolArguments")
    ask(client_for(server))
    server.responder = lambda request: Reply(status=500, body={"error": {"message": PROMPT}})
    with pytest.raises(ModelUnavailable) as caught:
        ask(client_for(server, max_retries=0))
    logged = caplog.text + str(caught.value)
    assert "MapToolArguments" not in logged and KEY not in logged and "secret plan" not in logged
    assert "role=observer" in caplog.text
