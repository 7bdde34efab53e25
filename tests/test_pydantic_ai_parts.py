"""The pydantic-ai capability's parts: configuration checks, the cut, message identity, the model adapter,
and that the base install never loads pydantic-ai."""

from __future__ import annotations

import asyncio
import gc
import logging
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryInfo,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from obsmem.app import Obsmem
from obsmem.errors import ConfigurationError, InvalidProject, InvalidSession, ModelUnavailable, ObsmemError
from obsmem.pipeline import estimate_tokens
from obsmem.pydantic_ai import ObservationalMemory, ObsmemClient, ProjectionView, PydanticAIChatModel
from obsmem.pydantic_ai.backends import RemoteMemory
from obsmem.pydantic_ai.compaction import compact, safe_cut
from obsmem.pydantic_ai.messages import EventLedger
from obsmem.settings import load_settings
from support.pydantic_ai_runs import request_tokens


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[Obsmem]:
    service = Obsmem(load_settings(data_dir=tmp_path / "data"))
    yield service
    service.close()


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"project": "Not A Slug"}, InvalidProject, "project must be a slug"),
        ({"project": "../etc"}, InvalidProject, "project must be a slug"),
        ({"session_id": ""}, InvalidSession, "session"),
        ({"observation_threshold": 0}, ConfigurationError, "observation_threshold must be a whole number of tokens"),
        ({"reflection_threshold": -5}, ConfigurationError, "reflection_threshold must be a whole number of tokens"),
        ({"observation_threshold": True}, ConfigurationError, "observation_threshold"),
        ({"observation_threshold": 10**12}, ConfigurationError, "100,000,000"),
        ({"context_window": 500}, ConfigurationError, "context_window must be a whole number of tokens from 1,000"),
        ({"context_window": 10_000, "observation_threshold": 6_000}, ConfigurationError, "must stay below"),
        ({"observer_model": "no-such-provider:model"}, ConfigurationError, "observer_model"),
        ({"event_handler": "print"}, ConfigurationError, "event_handler must be a callable"),
        ({"overflow_wait_seconds": -1}, ConfigurationError, "overflow_wait_seconds"),
    ],
)
def test_bad_configuration_is_refused_at_construction(
    memory: Obsmem, options: dict[str, object], error: type[Exception], match: str
) -> None:
    arguments: dict[str, object] = {"project": "p", "session_id": "s1"} | options
    with pytest.raises(error, match=match):
        ObservationalMemory(memory, **arguments)  # type: ignore[arg-type]


def test_exactly_one_memory_or_client(memory: Obsmem) -> None:
    client = ObsmemClient("http://127.0.0.1:9")
    with pytest.raises(ConfigurationError, match="both were given"):
        ObservationalMemory(memory, client=client, project="p", session_id="s1")
    with pytest.raises(ConfigurationError, match="exactly one"):
        ObservationalMemory(project="p", session_id="s1")
    with pytest.raises(ConfigurationError, match="must be an obsmem Obsmem or an ObsmemClient"):
        ObservationalMemory("http://127.0.0.1:9", project="p", session_id="s1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="base_url"):
        ObsmemClient("127.0.0.1:9")
    client.close()


def exchange(call_id: str) -> list[ModelMessage]:
    return [
        ModelResponse(parts=[ToolCallPart("run_tests", {"path": "a.py"}, tool_call_id=call_id)]),
        ModelRequest(parts=[ToolReturnPart("run_tests", "12 passed", tool_call_id=call_id)]),
    ]


def conversation() -> list[ModelMessage]:
    return [
        ModelRequest(parts=[SystemPromptPart("be careful"), UserPromptPart("turn 1")]),  # events 1, 2
        *exchange("c1"),  # 3, 4
        ModelResponse(parts=[TextPart("done 1")]),  # 5
        ModelRequest(parts=[UserPromptPart("turn 2")]),  # 6
        *exchange("c2"),  # 7, 8
        ModelResponse(parts=[TextPart("done 2")]),  # 9
        ModelRequest(parts=[UserPromptPart("turn 3")]),  # 10
    ]


def projection(through: int) -> ProjectionView:
    return ProjectionView('<obsmem-memory session="s1">\nObservations:\n- fact\n</obsmem-memory>', 20, through, 0, 1, 0)


def test_the_cut_covers_only_observed_messages_and_never_splits_a_tool_pair() -> None:
    messages = conversation()
    ledger = EventLedger()
    ledger.update(messages)
    assert [span.last for span in ledger.spans] == [2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert safe_cut(messages, ledger, 0) == 0
    assert safe_cut(messages, ledger, 3) == 1  # the call is observed, its return is not: keep both
    assert safe_cut(messages, ledger, 4) == 3
    assert safe_cut(messages, ledger, 7) == 5  # c2's call is observed, its return is not: keep both
    assert safe_cut(messages, ledger, 10) == 8  # the request being sent always stays


def test_the_replacement_keeps_the_system_prompt_and_says_what_it_stands_for() -> None:
    messages = conversation()
    ledger = EventLedger()
    ledger.update(messages)
    result = compact(messages, ledger, projection(9))
    assert result.replaced_messages == 8 and result.replaced_through_seq == 9
    [request] = result.messages
    assert isinstance(request, ModelRequest)
    kinds = [type(part).__name__ for part in request.parts]
    assert kinds == ["SystemPromptPart", "UserPromptPart", "UserPromptPart"]
    note = request.parts[1].content
    assert "the first 8 messages of this conversation (events #1-#9)" in str(note)
    assert "<obsmem-memory" in str(note) and request.parts[2].content == "turn 3"


def test_the_request_size_counts_what_the_replacement_carries_back() -> None:
    system = "Follow the house rules. " * 1_000  # about 4,000 words, kept in the replacement
    messages = conversation()
    messages[0] = ModelRequest(parts=[SystemPromptPart(system), UserPromptPart("turn 1")])
    ledger = EventLedger()
    ledger.update(messages)
    result = compact(messages, ledger, projection(9))
    sent = request_tokens(result.messages)
    assert sent > estimate_tokens(system)
    # The estimate is what goes to the model (give or take rounding and the fixture's memory size).
    assert sent - 5 <= result.request_tokens <= sent + 20
    # The current prompt, moved back into the replacement when the cut passes it, counts as well.
    prompt = "please " * 2_000
    moved = [
        ModelRequest(parts=[UserPromptPart(prompt)]),
        *exchange("c1"),
        ModelResponse(parts=[ToolCallPart("run_tests", {}, tool_call_id="c3")]),
        ModelRequest(parts=[ToolReturnPart("run_tests", "ok", tool_call_id="c3")]),
    ]
    ledger = EventLedger()
    ledger.update(moved)
    result = compact(moved, ledger, projection(4))
    sent = request_tokens(result.messages)
    assert sent > estimate_tokens(prompt) and sent - 5 <= result.request_tokens <= sent + 20


def test_a_cut_past_the_current_prompt_puts_it_back() -> None:
    messages = [
        ModelRequest(parts=[UserPromptPart("the task")]),
        *exchange("c1"),
        *exchange("c2"),
        ModelResponse(parts=[ToolCallPart("run_tests", {}, tool_call_id="c3")]),
        ModelRequest(parts=[ToolReturnPart("run_tests", "ok", tool_call_id="c3")]),
    ]
    ledger = EventLedger()
    ledger.update(messages)
    result = compact(messages, ledger, projection(5))
    first = result.messages[0]
    assert isinstance(first, ModelRequest)
    assert [p.content for p in first.parts if isinstance(p, UserPromptPart)][-1] == "the task"
    assert isinstance(result.messages[1], ModelResponse)  # the tail starts at c3's call, with its return


def test_message_identity_is_the_position_and_the_same_history_numbers_the_same() -> None:
    messages = conversation()
    first, again = EventLedger(), EventLedger()
    first.update(messages[:4])
    first.update(messages)
    again.update([*messages])
    assert first.events == again.events and first.last_seq == 10
    retried = ModelRequest(parts=[ToolReturnPart("run_tests", "bad args", tool_call_id="c9", outcome="retried")])
    assert ledger_event(retried) | {"created_at": None} == {
        "role": "tool",
        "type": "tool_result",
        "content": "[retried] bad args",
        "tool_name": "run_tests",
        "tool_call_id": "c9",
        "created_at": None,
        "seq": 1,
    }
    feedback = ledger_event(ModelRequest(parts=[RetryFeedbackPart("answer in JSON", retry=RetryInfo(cause="output"))]))
    assert feedback["role"] == "system" and feedback["content"] == "retry requested: answer in JSON"
    call = ledger_event(ModelResponse(parts=[ToolCallPart("run_tests", '{"path": "a.py"}', tool_call_id="x")]))
    assert call["tool_args"] == {"path": "a.py"} and call["type"] == "tool_call"


def ledger_event(message: ModelMessage) -> dict[str, object]:
    ledger = EventLedger()
    ledger.update([message])
    return ledger.events[0]


def test_the_model_adapter_speaks_the_pipelines_shape() -> None:
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        assert [tool.name for tool in info.function_tools] == ["record_observations"]
        return ModelResponse(parts=[ToolCallPart("record_observations", {"observations": []}, tool_call_id="k")])

    adapter = PydanticAIChatModel(FunctionModel(model, profile={"context_window": 9_000}), role="observer")
    tool = {"type": "function", "function": {"name": "record_observations", "parameters": {"type": "object"}}}
    conversation = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "data"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "a", "function": {"name": "t", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "receipt"},
    ]
    reply = adapter.complete(conversation, tools=[tool], tool_choice="auto")
    assert adapter.context_window_tokens == 9_000
    assert reply.tool_calls[0].name == "record_observations" and reply.tool_calls[0].arguments == '{"observations": []}'
    kinds = [[type(part).__name__ for part in message.parts] for message in seen[0]]
    assert kinds == [["SystemPromptPart", "UserPromptPart"], ["ToolCallPart"], ["ToolReturnPart"]]
    assert seen[0][2].parts[0].tool_name == "t"  # type: ignore[union-attr]
    assert PydanticAIChatModel(TestModel(), role="reflector").complete([{"role": "user", "content": "x"}])
    adapter.close()


def test_a_failing_model_is_a_model_error_without_its_text() -> None:
    def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise RuntimeError("secret prompt text")

    adapter = PydanticAIChatModel(FunctionModel(broken), role="observer")
    with pytest.raises(ModelUnavailable) as caught:
        adapter.complete([{"role": "user", "content": "x"}])
    assert "RuntimeError" in caught.value.message and "secret" not in caught.value.message
    adapter.close()
    with pytest.raises(ModelUnavailable, match="closed"):
        adapter.complete([{"role": "user", "content": "x"}])


def _call_in_thread(adapter: PydanticAIChatModel) -> tuple[threading.Thread, list[object]]:
    """One ``complete`` on a daemon thread (a regression must not hang the run for the call's timeout);
    what it returned or raised lands in the list."""
    outcome: list[object] = []

    def call() -> None:
        try:
            outcome.append(adapter.complete([{"role": "user", "content": "x"}]))
        except Exception as exc:  # noqa: BLE001 - the test inspects whatever ended the call
            outcome.append(exc)

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    return worker, outcome


def _nothing_left_pending(caught: list[warnings.WarningMessage], logged: str) -> bool:
    """No request left unstarted ("never awaited") or dropped while running ("Task was destroyed")."""
    return not [w for w in caught if "never awaited" in str(w.message)] and "Task was destroyed" not in logged


def test_closing_the_adapter_ends_a_call_in_flight_at_once_and_leaves_nothing_pending(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A capability closes the adapters it routed while a pipeline worker may be inside a call: that call
    ends with model_unavailable at once (not after its 120 s timeout), even when the model ignores its
    cancellation for a while, and nothing is left pending on the loop."""
    entered, released = threading.Event(), asyncio.Event()

    async def stuck(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        entered.set()
        try:
            await released.wait()  # never set: only closing ends this call
        except asyncio.CancelledError:
            await asyncio.sleep(2)  # a model that takes its time to stop
            raise
        return ModelResponse(parts=[TextPart("late")])

    adapter = PydanticAIChatModel(FunctionModel(stuck), role="observer")
    gc.collect()  # what earlier tests left is not this test's to report
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.ERROR, logger="asyncio"):
        warnings.simplefilter("always")
        worker, outcome = _call_in_thread(adapter)
        assert entered.wait(10)
        started = time.monotonic()
        closing = threading.Thread(target=adapter.close, daemon=True)
        closing.start()
        worker.join(10)
        ended = time.monotonic() - started
        closing.join(10)
        gc.collect()
    assert not worker.is_alive() and ended < 1.5  # before the model has even stopped
    assert not closing.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], ModelUnavailable)
    assert "closed during the call" in outcome[0].message
    assert _nothing_left_pending(caught, caplog.text)
    assert adapter._loop.is_closed()  # noqa: SLF001 - close returned once the loop was done
    adapter.close()  # a second close is a no-op
    with pytest.raises(ModelUnavailable, match="closed"):
        adapter.complete([{"role": "user", "content": "x"}])


def test_a_call_handed_over_but_not_started_is_ended_by_close_and_never_left_unawaited(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The request CI once reported as "coroutine 'model_request' was never awaited": handed to the loop
    while the loop was busy, then the adapter closed before the loop reached it."""
    adapter = PydanticAIChatModel(TestModel(), role="observer")
    busy, release = threading.Event(), threading.Event()

    def occupy() -> None:
        busy.set()
        release.wait(10)

    adapter._loop.call_soon_threadsafe(occupy)  # noqa: SLF001 - the only way to hold the loop between two steps
    assert busy.wait(10)
    gc.collect()
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.ERROR, logger="asyncio"):
        warnings.simplefilter("always")
        worker, outcome = _call_in_thread(adapter)
        deadline = time.monotonic() + 10
        while not adapter._in_flight and time.monotonic() < deadline:  # noqa: SLF001 - wait for the handover
            time.sleep(0.01)
        closing = threading.Thread(target=adapter.close, daemon=True)
        closing.start()
        worker.join(10)
        release.set()
        closing.join(10)
        gc.collect()
    assert not worker.is_alive() and not closing.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], ModelUnavailable)
    assert _nothing_left_pending(caught, caplog.text)


def test_every_close_returns_once_the_loop_is_closed() -> None:
    """Two closes at once (the capability and a shutdown racing): the one that does not stop the loop
    waits for it too, so neither returns while the loop still runs."""
    entered, stopping = threading.Event(), threading.Event()

    async def slow_to_stop(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stopping.set()
            await asyncio.sleep(1)
            raise
        return ModelResponse(parts=[TextPart("never")])

    adapter = PydanticAIChatModel(FunctionModel(slow_to_stop), role="observer")
    worker, _ = _call_in_thread(adapter)
    assert entered.wait(10)
    returned_closed: list[bool] = []

    def close_and_look() -> None:
        adapter.close()
        returned_closed.append(adapter._loop.is_closed())  # noqa: SLF001 - the state the moment close returned

    closes = [threading.Thread(target=close_and_look, daemon=True) for _ in range(2)]
    for closing in closes:
        closing.start()
    assert stopping.wait(10)
    for closing in closes:
        closing.join(10)
    worker.join(10)
    assert returned_closed == [True, True]


def test_a_retired_adapter_finishes_its_call_then_closes() -> None:
    """A model switch retires the previous adapter: the job in flight gets its reply from the model it
    started with, new calls are refused, and the adapter closes once that call has ended."""
    entered, finish = threading.Event(), threading.Event()

    async def slow(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        entered.set()
        while not finish.is_set():
            await asyncio.sleep(0.01)
        return ModelResponse(parts=[TextPart("finished on the old model")])

    adapter = PydanticAIChatModel(FunctionModel(slow), role="observer")
    worker, outcome = _call_in_thread(adapter)
    assert entered.wait(10)
    adapter.retire()
    with pytest.raises(ModelUnavailable, match="closed"):
        adapter.complete([{"role": "user", "content": "x"}])
    finish.set()
    worker.join(10)
    assert len(outcome) == 1 and getattr(outcome[0], "content", None) == "finished on the old model"
    adapter._thread.join(10)  # noqa: SLF001 - the loop's thread ends once the adapter has closed
    assert not adapter._thread.is_alive()  # noqa: SLF001


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the SystemExit below
def test_a_call_after_the_loop_thread_died_is_refused_at_once() -> None:
    """If the loop's thread ends without a close (an exception escaping the loop), a call is refused
    at once instead of waiting out its timeout on a loop nobody runs."""
    adapter = PydanticAIChatModel(TestModel(), role="observer", timeout_seconds=60)
    adapter._loop.call_soon_threadsafe(sys.exit)  # noqa: SLF001 - SystemExit ends the loop's thread
    adapter._thread.join(10)  # noqa: SLF001
    started = time.monotonic()
    with pytest.raises(ModelUnavailable, match="closed"):
        adapter.complete([{"role": "user", "content": "x"}])
    assert time.monotonic() - started < 1
    adapter.close()


def test_the_base_install_never_loads_pydantic_ai() -> None:
    code = (
        "import sys\n"
        "import obsmem, obsmem.app, obsmem.pipeline, obsmem.surfaces.cli, obsmem.surfaces.tools\n"
        "import obsmem.surfaces.http.app, obsmem.surfaces.mcp_server, obsmem.eval\n"
        "from obsmem import Obsmem\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] == 'pydantic_ai'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


class _NotObsmem(BaseHTTPRequestHandler):
    """A server in front of the URL that answers every request 200 with an HTML page (a proxy's login page)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
        pass

    def _page(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b"<html>please sign in</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _page  # noqa: N815 - http.server naming


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan"), float("inf"), True, "30"])
def test_a_client_timeout_that_bounds_nothing_is_refused(timeout: object) -> None:
    # NaN made every call time out at once ("cannot be reached"); infinity raised OverflowError from each call.
    with pytest.raises(ValueError, match="timeout_seconds must be a positive number"):
        ObsmemClient("http://127.0.0.1:9", timeout_seconds=timeout)  # type: ignore[arg-type]


def test_a_reply_that_is_not_json_is_service_unavailable() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotObsmem)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    client = ObsmemClient(f"http://127.0.0.1:{server.server_address[1]}")
    try:
        remote = RemoteMemory(client, "p", "s1")
        for call in (remote.projection, remote.last_seq, lambda: client.call("POST", "/projects/p/groom")):
            with pytest.raises(ObsmemError, match="not JSON") as failure:
                call()
            assert failure.value.code == "service_unavailable"
            assert "sign in" not in str(failure.value)  # the page is not repeated in the error
    finally:
        client.close()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class _Dripping(BaseHTTPRequestHandler):
    """A server that answers one byte at a time, each well within a read timeout: the headers (``headers``) or
    the body. It drips at most ``DRIP_BYTES`` and records whether the client hung up before it was done."""

    protocol_version = "HTTP/1.1"
    DRIP_BYTES = 300
    hung_up: list[bool] = []
    done = threading.Event()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        dripped_head = self.path.endswith("/headers")
        if dripped_head:
            drip = b"".join(b"X-Slow-%d: 1\r\n" % i for i in range(self.DRIP_BYTES))[: self.DRIP_BYTES]
        else:
            head += b"Content-Length: %d\r\n\r\n" % self.DRIP_BYTES
            drip = b" " * self.DRIP_BYTES
        try:
            self.wfile.write(head)
            self.wfile.flush()
            for byte in drip:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.1)
        except OSError:  # the client hung up
            _Dripping.hung_up.append(True)
            return
        finally:
            _Dripping.done.set()
        _Dripping.hung_up.append(False)
        self.close_connection = True


@pytest.mark.parametrize("what", ["headers", "body"])
def test_a_server_that_drips_its_answer_is_given_up_on_at_the_clients_deadline(what: str) -> None:
    """Each byte comes within the read timeout, so only a deadline over the whole call ends it: without one a
    server (or a proxy) that drips kept the call, and the agent's run waiting on it, for as long as it dripped."""
    _Dripping.hung_up.clear()
    _Dripping.done.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Dripping)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    client = ObsmemClient(f"http://127.0.0.1:{server.server_address[1]}", timeout_seconds=1)
    try:
        with pytest.raises(ObsmemError) as failure:
            client.call("GET", f"/health/{what}")
        assert failure.value.code == "service_unavailable"
        assert _Dripping.done.wait(60)  # the handler ends at its next write, or at the end of its drip
    finally:
        client.close()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert _Dripping.hung_up == [True]  # the client gave up while the server was still dripping
