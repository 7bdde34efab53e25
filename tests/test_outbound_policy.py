"""The outbound HTTP policy holds for each client: the model, embedding and rerank clients, on real loopback.

One policy (obsmem.outbound): a redirect is never followed, a body over the size cap is refused, the key
travels only in the Authorization header, one deadline bounds the whole request, and neither logs nor
errors carry the key or the exchanged text. Each rule is checked against a real HTTP server on 127.0.0.1
for each of the three clients, through the client's own public method.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from obsmem.errors import EmbeddingUnavailable, ModelBadResponse, ModelRejected, ModelTimeout, RerankerUnavailable
from obsmem.indexer.embed_openai import OpenAIEmbedder
from obsmem.outbound import Endpoint, OutboundError
from obsmem.pipeline.llm import ChatClient
from obsmem.retrieval.rerank import HttpReranker
from obsmem.settings import EmbeddingSettings, ModelSettings, RerankerSettings

KEY = "sk-policy-0123456789abcdefghij"
KEY_ENV = "OBSMEM_TEST_POLICY_KEY"
TEXT = "the private note about MapToolArguments"
DEADLINE = 1.0
MiB = 1024 * 1024


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: bytes


class PolicyServer(ThreadingHTTPServer):
    """Answers the three APIs correctly, or misbehaves as ``behaviour`` says: redirect, oversize, drip."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.behaviour = "ok"
        self.redirect_to = ""
        self.oversize_bytes = 0
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that hang up mid-body (the point of the oversize and drip cases) are not errors

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def stop(self) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: PolicyServer  # type: ignore[assignment]

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server naming
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        server = self.server
        with server.lock:
            server.seen.append(Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        if server.behaviour == "redirect":
            self.send_response(302)
            self.send_header("Location", server.redirect_to + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif server.behaviour == "oversize":
            self._oversize(server.oversize_bytes)
        else:
            reply = json.dumps(_correct_reply(self.path, json.loads(body))).encode()
            self._send(reply, drip=server.behaviour == "drip")

    def _send(self, payload: bytes, *, drip: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if not drip:
            self.wfile.write(payload)
            return
        for index in range(len(payload)):  # one byte every 50 ms: no single read ever times out
            self.wfile.write(payload[index : index + 1])
            self.wfile.flush()
            if self.server.stopping.wait(0.05):
                return

    def _oversize(self, size: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        piece = b" " * MiB
        sent = 0
        while sent < size:
            chunk = piece[: size - sent]
            self.wfile.write(chunk)
            sent += len(chunk)


def _correct_reply(path: str, request: dict[str, Any]) -> Any:
    if path.endswith("/chat/completions"):
        return {"choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}
    if path.endswith("/embeddings"):
        return {"data": [{"index": i, "embedding": [1.0, 0.0, 0.0]} for i, _ in enumerate(request["input"])]}
    return {"results": [{"index": i, "relevance_score": 1.0} for i, _ in enumerate(request["documents"])]}


@dataclass(frozen=True)
class Client:
    """One outbound client as its callers use it: ``call(base_url, deadline)`` makes one request; ``errors``
    are its failures."""

    name: str
    path: str
    cap_bytes: int
    errors: tuple[type[Exception], ...]
    call: Callable[[str, float], object]


def _ask_model(base_url: str, deadline: float = DEADLINE) -> object:
    settings = ModelSettings(
        base_url=base_url,
        model_id="m",
        api_key=KEY,
        timeout_seconds=deadline,
        max_retries=0,  # type: ignore[arg-type]
    )
    client = ChatClient(settings, role="observer")
    try:
        return client.complete([{"role": "user", "content": TEXT}])
    finally:
        client.close()


def _embed(base_url: str, deadline: float = DEADLINE) -> object:
    settings = EmbeddingSettings(
        provider="openai", base_url=base_url, model_id="e", api_key_env=KEY_ENV, timeout_seconds=deadline
    )
    embedder = OpenAIEmbedder(settings)
    try:
        return embedder.embed_batch([TEXT], purpose="document")
    finally:
        embedder.close()


def _rerank(base_url: str, deadline: float = DEADLINE) -> object:
    settings = RerankerSettings(
        provider="http", base_url=base_url, model_id="r", api_key_env=KEY_ENV, timeout_seconds=deadline
    )
    reranker = HttpReranker(settings)
    try:
        return reranker.score("which note", [TEXT])
    finally:
        reranker.close()


CLIENTS = [
    Client("model", "/v1/chat/completions", 8 * MiB, (ModelRejected, ModelBadResponse, ModelTimeout), _ask_model),
    Client("embedding", "/v1/embeddings", 64 * MiB, (EmbeddingUnavailable,), _embed),
    Client("rerank", "/v1/rerank", 64 * MiB, (RerankerUnavailable,), _rerank),
]


@pytest.fixture(params=CLIENTS, ids=lambda client: client.name)
def client(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Client:
    """Each outbound client in turn (not the shared HTTP test ``client``), its key in the environment."""
    monkeypatch.setenv(KEY_ENV, KEY)
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def server() -> Iterator[PolicyServer]:
    """Not the shared scripted chat ``server``: this one answers every client's endpoint with whatever
    policy breach a test sets (redirects, oversized or slow bodies), which a chat script cannot."""
    running = PolicyServer()
    try:
        yield running
    finally:
        running.stop()


def _safe(error: BaseException, caplog: pytest.LogCaptureFixture) -> None:
    """Neither the error nor any log line carries the key or the text sent."""
    for where in (str(error), repr(error), caplog.text):
        assert KEY not in where and "MapToolArguments" not in where
    assert error.__cause__ is None


def test_the_key_travels_only_in_the_authorization_header(client: Client, server: PolicyServer) -> None:
    client.call(server.base_url, DEADLINE)
    (request,) = server.seen
    assert request.path == client.path
    assert request.headers["authorization"] == f"Bearer {KEY}"
    others = {name: value for name, value in request.headers.items() if name != "authorization"}
    assert KEY not in json.dumps(others) and KEY.encode() not in request.body
    assert request.headers["user-agent"].startswith("obsmem/")


def test_a_redirect_is_never_followed(client: Client, server: PolicyServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    elsewhere = PolicyServer()
    try:
        server.behaviour = "redirect"
        server.redirect_to = elsewhere.base_url.removesuffix("/v1")
        with pytest.raises(client.errors) as caught:
            client.call(server.base_url, DEADLINE)
        assert "HTTP 302" in str(caught.value)
        assert len(server.seen) == 1 and elsewhere.seen == []  # neither the key nor the text went there
        _safe(caught.value, caplog)
    finally:
        elsewhere.stop()


def test_a_body_over_the_size_cap_is_refused(
    client: Client, server: PolicyServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.behaviour = "oversize"
    server.oversize_bytes = client.cap_bytes + 1
    with pytest.raises(client.errors) as caught:
        client.call(server.base_url, 60.0)  # time to stream the cap on a busy machine: the cap must stop it
    assert "too large" in str(caught.value) or "larger than 8 MiB" in str(caught.value)
    _safe(caught.value, caplog)


def test_a_body_at_the_size_cap_is_read(server: PolicyServer) -> None:
    server.behaviour = "oversize"
    server.oversize_bytes = 2 * MiB
    endpoint = Endpoint(server.base_url + "/x", timeout_seconds=5, max_response_bytes=2 * MiB)
    try:
        assert len(endpoint.send(b"{}").body) == 2 * MiB
        server.oversize_bytes += 1
        with pytest.raises(OutboundError) as caught:
            endpoint.send(b"{}")
        assert caught.value.stage == "too_large"
    finally:
        endpoint.close()


def test_one_deadline_bounds_a_drip_fed_reply(
    client: Client, server: PolicyServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.behaviour = "drip"  # every byte arrives in time for a per-read timeout; the whole reply never does
    started = time.monotonic()
    with pytest.raises(client.errors) as caught:
        client.call(server.base_url, DEADLINE)
    elapsed = time.monotonic() - started
    assert DEADLINE * 0.9 <= elapsed < DEADLINE + 1.5
    assert f"within {DEADLINE:g} s" in str(caught.value)
    _safe(caught.value, caplog)
