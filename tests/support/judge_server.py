"""A judge on 127.0.0.1 for the trust tests: answers ``POST /judge`` as its ``behaviour`` says.

Behaviours: a number (``{"p": number}``), ``"slow"`` (waits ``delay`` seconds, then answers 0.9),
``"garbage"`` (a body that is not JSON), ``"no-p"`` (JSON without p), ``"text-p"`` (p as a string),
``"deep-p"`` (p nested deeper than a JSON parser follows), ``"status"`` (HTTP 500). Every request body is
kept in ``requests``.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JudgeServer:
    def __init__(self, behaviour: float | str = 0.9, *, delay: float = 2.0) -> None:
        self.behaviour = behaviour
        self.delay = delay
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        judge = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server naming
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with judge._lock:
                    judge.requests.append(json.loads(body))
                status, reply = judge.answer(self.path)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                with contextlib.suppress(OSError):  # the client gave up (the slow judge's point)
                    self.wfile.write(reply)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="judge", daemon=True)

    def answer(self, path: str) -> tuple[int, bytes]:
        if path != "/judge":
            return 404, b'{"error": "not found"}'
        behaviour = self.behaviour
        if behaviour == "slow":
            time.sleep(self.delay)
            return 200, b'{"p": 0.9}'
        if behaviour == "garbage":
            return 200, b"<html>not json"
        if behaviour == "no-p":
            return 200, b'{"confidence": 0.9}'
        if behaviour == "text-p":
            return 200, b'{"p": "0.9"}'
        if behaviour == "deep-p":
            return 200, b'{"p": ' + b"[" * 5000 + b"]" * 5000 + b"}"
        if behaviour == "status":
            return 500, b"{}"
        return 200, json.dumps({"p": behaviour}).encode()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> JudgeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def closed_port_url() -> str:
    """A loopback URL nothing listens on (a judge that is down)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"
