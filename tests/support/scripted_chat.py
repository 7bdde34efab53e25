"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for tests (not a test module).

No model can run here, so tests talk real HTTP to this server, which answers ``POST /v1/chat/completions``
with whatever its responder returns: tool calls, text, HTTP errors, slow or dripping bodies, or no answer
at all. Every request is recorded (headers and body) so tests can check what a model would have seen.

``ObserverScript`` plays a well-behaved Observer: it records one observation per event it may cite, then
says it is done. ``ReflectorScript`` and ``DropperScript`` play the Reflector (reflections over groups of
the least covered observations shown) and the Dropper (proposes every covered observation shown, or all
of them); ``PipelineScript`` answers each request with the one whose tool it offers; ``Rounds`` answers
by round of a conversation. Runnable as ``python tests/support/scripted_chat.py PORT_FILE`` (it imports
nothing from the tests) so worker processes can share one.
"""

from __future__ import annotations

import json
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.body)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.json["messages"]

    @property
    def transcript(self) -> str:
        return next((m["content"] for m in self.messages if m["role"] == "user"), "")


@dataclass
class Reply:
    status: int = 200
    body: dict[str, Any] | bytes | None = None
    delay: float = 0.0  # seconds before the status line
    hang: bool = False  # never answer (until the server stops)
    drip_seconds: float | None = None  # send the body one byte at a time, this far apart
    headers: dict[str, str] = field(default_factory=dict)


Responder = Callable[[Request], Reply]  # what the server answers a request with


def completion(message: dict[str, Any], finish_reason: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }


def text(content: str) -> Reply:
    return Reply(body=completion({"role": "assistant", "content": content}))


_call_counter = 0
_counter_lock = threading.Lock()


def tool_calls(*calls: tuple[str, dict[str, Any] | list[Any] | str]) -> Reply:
    global _call_counter
    items = []
    for name, args in calls:
        with _counter_lock:
            _call_counter += 1
            number = _call_counter
        arguments = args if isinstance(args, str) else json.dumps(args)
        items.append({"id": f"call_{number}", "type": "function", "function": {"name": name, "arguments": arguments}})
    return Reply(body=completion({"role": "assistant", "content": None, "tool_calls": items}, "tool_calls"))


def record(*observations: dict[str, Any]) -> Reply:
    return tool_calls(("record_observations", {"observations": list(observations)}))


def error(status: int, retry_after: float | None = None) -> Reply:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    return Reply(status=status, body={"error": {"message": "scripted failure"}}, headers=headers)


_CITE = re.compile(r"^Events you may cite: (.*)$", re.MULTILINE)
_EVENT = re.compile(r"^#(\d+) (\d{4}-\d\d-\d\d \d\d:\d\d) ", re.MULTILINE)


def citable_seqs(transcript: str) -> list[int]:
    match = _CITE.search(transcript)
    if match is None or match.group(1).strip() == "none":
        return []
    seqs: list[int] = []
    for part in match.group(1).split(", "):
        if "-" in part:
            low, high = part.split("-")
            seqs.extend(range(int(low.lstrip("#")), int(high.lstrip("#")) + 1))
        else:
            seqs.append(int(part.lstrip("#")))
    return seqs


def event_times(transcript: str) -> dict[int, str]:
    return {int(seq): when for seq, when in _EVENT.findall(transcript)}


class StageScript(ABC):
    """What the stage scripts share: a count of calls (contents name the call, so a reply committed twice
    shows), "done" once the conversation has gone past its opening request, and a delay (plus ``jitter``)
    before every reply."""

    def __init__(self, *, delay: float = 0.0, jitter: Callable[[], float] | None = None) -> None:
        self.delay = delay
        self.jitter = jitter
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, request: Request) -> Reply:
        with self._lock:
            self.calls += 1
            call = self.calls
        reply = self.opening_reply(request, call) if request.messages[-1]["role"] == "user" else text("done")
        reply.delay = self.delay + (self.jitter() if self.jitter else 0.0)
        return reply

    @abstractmethod
    def opening_reply(self, request: Request, call: int) -> Reply:
        """The reply to a conversation's opening request, the ``call``-th request this script answers."""


class ObserverScript(StageScript):
    """One observation per citable event, or per ``group`` of them (content names the events and this
    call), then "done"."""

    def __init__(self, *, delay: float = 0.0, jitter: Callable[[], float] | None = None, group: int = 1) -> None:
        super().__init__(delay=delay, jitter=jitter)
        self.group = group

    def opening_reply(self, request: Request, call: int) -> Reply:
        transcript = request.transcript
        times = event_times(transcript)
        seqs = citable_seqs(transcript)
        if not seqs:
            return text("nothing to record")
        groups = [seqs[i : i + self.group] for i in range(0, len(seqs), self.group)]
        return record(
            *[
                {
                    "content": f"event {', '.join(map(str, refs))} observed in call {call}",
                    "timestamp": times[refs[0]],
                    "importance": "medium",
                    "source_refs": refs,
                }
                for refs in groups
            ]
        )


_OBSERVATION_LINE = re.compile(
    r"^- \[([0-9a-f]{12})\] (\d{4}-\d\d-\d\d \d\d:\d\d) \| (\w+) \| ([a-z ]+) \| (.*)$", re.MULTILINE
)


@dataclass(frozen=True)
class ShownObservation:
    id: str
    timestamp: str
    importance: str
    coverage: str
    content: str


def shown_observations(message: str) -> list[ShownObservation]:
    """Observations as the Reflector or Dropper request lists them."""
    return [ShownObservation(*match) for match in _OBSERVATION_LINE.findall(message)]


def offered_tool(request: Request) -> str | None:
    tools = request.json.get("tools") or []
    return tools[0]["function"]["name"] if tools else None


def reflections(*items: dict[str, Any]) -> Reply:
    return tool_calls(("record_reflections", {"reflections": list(items)}))


def drops(*ids: str) -> Reply:
    return tool_calls(("drop_observations", {"observation_ids": list(ids)}))


class ReflectorScript(StageScript):
    """Reflections over groups of ``group`` observations, least covered first, at most ``most`` per reply;
    then "done". Content names the call, so a reflection committed twice would show."""

    def __init__(
        self, *, group: int = 3, most: int = 4, delay: float = 0.0, jitter: Callable[[], float] | None = None
    ) -> None:
        super().__init__(delay=delay, jitter=jitter)
        self.group = group
        self.most = most

    def opening_reply(self, request: Request, call: int) -> Reply:
        shown = shown_observations(request.transcript)
        order = {"not covered": 0, "partly covered": 1, "strongly covered": 2}
        shown.sort(key=lambda o: (order[o.coverage], o.timestamp, o.id))
        groups = [shown[i : i + self.group] for i in range(0, len(shown), self.group)][: self.most]
        if not groups:
            return text("nothing to reflect")
        return reflections(
            *[
                {
                    "content": f"reflection over {', '.join(o.id for o in members)} in call {call}",
                    "supporting_observation_ids": [o.id for o in members],
                }
                for members in groups
            ]
        )


class DropperScript(StageScript):
    """Proposes every covered observation shown (``everything``: every one shown), then "done"."""

    def __init__(
        self, *, everything: bool = False, delay: float = 0.0, jitter: Callable[[], float] | None = None
    ) -> None:
        super().__init__(delay=delay, jitter=jitter)
        self.everything = everything

    def opening_reply(self, request: Request, call: int) -> Reply:
        shown = shown_observations(request.transcript)
        chosen = [o.id for o in shown if self.everything or o.coverage != "not covered"]
        return drops(*chosen) if chosen else text("nothing is safe to retire")


class PipelineScript:
    """Observer, Reflector and Dropper in one responder, chosen by the tool a request offers."""

    def __init__(
        self,
        observer: Responder | None = None,
        reflector: Responder | None = None,
        dropper: Responder | None = None,
    ) -> None:
        self.observer = observer or ObserverScript()
        self.reflector = reflector or ReflectorScript()
        self.dropper = dropper or DropperScript()
        self.models: list[tuple[str | None, str]] = []  # (tool, model) of every request
        self._lock = threading.Lock()

    def __call__(self, request: Request) -> Reply:
        tool = offered_tool(request)
        with self._lock:
            self.models.append((tool, request.json.get("model", "")))
        if tool == "record_reflections":
            return self.reflector(request)
        if tool == "drop_observations":
            return self.dropper(request)
        return self.observer(request)


class Rounds:
    """Reply by round of one stage's conversation: the n-th model reply of a cycle comes from ``rounds[n]``
    (the last one repeats)."""

    def __init__(self, *rounds: Responder) -> None:
        self.rounds = rounds

    def __call__(self, request: Request) -> Reply:
        index = sum(1 for m in request.messages if m["role"] == "assistant")
        return self.rounds[min(index, len(self.rounds) - 1)](request)


class HeldReplies:
    """``inner``'s replies, each held until ``released`` is set (at most a minute): while it is not, no model
    call has been answered, however slow the machine. ``answered`` counts the replies given."""

    def __init__(self, inner: Responder) -> None:
        self.inner = inner
        self.released = threading.Event()
        self.answered = 0

    def __call__(self, request: Request) -> Reply:
        self.released.wait(60)
        self.answered += 1
        return self.inner(request)


def tool_results(request: Request) -> list[dict[str, Any]]:
    """What the service answered to the model's earlier tool calls in this conversation."""
    return [json.loads(m["content"]) for m in request.messages if m["role"] == "tool"]


class ScriptedChatServer:
    """Serve scripted replies on 127.0.0.1 (port chosen by the OS). Use as a context manager."""

    def __init__(self, responder: Responder | None = None) -> None:
        self.responder: Responder = responder or ObserverScript()
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server naming
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                request = Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with server._lock:
                    server.requests.append(request)
                if self.path != "/v1/chat/completions":
                    reply = Reply(status=404, body={"error": {"message": "not found"}})
                else:
                    reply = server.responder(request)
                server._send(self, reply)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # clients killed mid-request (the point of some tests) are not errors here

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="scripted-chat", daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _send(self, handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        if reply.hang:
            self._stopping.wait(120)
            handler.close_connection = True
            return
        if reply.delay and self._stopping.wait(reply.delay):
            handler.close_connection = True
            return
        payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body or {}).encode()
        try:
            handler.send_response(reply.status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            if reply.drip_seconds is None:
                handler.wfile.write(payload)
            else:
                for index in range(len(payload)):
                    handler.wfile.write(payload[index : index + 1])
                    handler.wfile.flush()
                    if self._stopping.wait(reply.drip_seconds):
                        break
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True

    def start(self) -> ScriptedChatServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> ScriptedChatServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def all_bytes(self) -> bytes:
        with self._lock:
            return b"\n".join(
                b"\n".join(f"{k}: {v}".encode() for k, v in r.headers.items()) + b"\n" + r.body for r in self.requests
            )


def main(port_file: str, delay: float = 0.0, jitter: float = 0.0, group: float = 1) -> None:
    import random

    spread = (lambda: random.uniform(0, jitter)) if jitter else None
    script = PipelineScript(
        ObserverScript(delay=delay, jitter=spread, group=int(group)),
        ReflectorScript(delay=delay, jitter=spread),
        DropperScript(delay=delay, jitter=spread),
    )
    server = ScriptedChatServer(script).start()
    with open(port_file + ".tmp", "w") as handle:
        handle.write(str(server.port))
    import os

    os.replace(port_file + ".tmp", port_file)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    import sys

    main(sys.argv[1], *(float(a) for a in sys.argv[2:]))
