"""OpenAI-compatible embedding and rerank servers on 127.0.0.1 for the tests.

Real HTTP servers (``http.server`` in a thread), scripted: ``behaviour`` picks a correct reply or one of
the failures obsmem must survive (slow, drip-fed, 5xx, wrong dimensions, NaN, malformed). Embeddings are
hashed bags of words — deterministic, and texts sharing words are similar — so results can be checked
against a brute-force reference computed from the same function.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DIMENSIONS = 128
_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def embed(text: str, dimensions: int = DIMENSIONS) -> list[float]:
    vector = [0.0] * dimensions
    vector[0] = 0.05  # never a zero vector
    for word in words(text):
        digest = hashlib.sha256(word.encode()).digest()
        weight = 0.5 + digest[2] / 255.0  # varied weights, so different texts almost never tie exactly
        vector[1 + int.from_bytes(digest[:4], "big") % (dimensions - 1)] += weight if digest[1] % 2 else -weight
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector]


def overlap_score(query: str, document: str) -> float:
    wanted = set(words(query))
    return float(sum(1 for w in set(words(document)) if w in wanted))


class _Handler(BaseHTTPRequestHandler):
    server: ModelServer  # type: ignore[assignment]

    def log_message(self, *args: Any) -> None:  # keep test output quiet
        pass

    def _send(self, status: int, body: bytes, *, drip: float = 0.0) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if drip:
            for i in range(len(body)):
                self.wfile.write(body[i : i + 1])
                self.wfile.flush()
                time.sleep(drip)
                if self.server.stopping.is_set():
                    return
        else:
            self.wfile.write(body)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        request = json.loads(self.rfile.read(length))
        server = self.server
        with server.lock:
            server.requests.append({"path": self.path, "body": request, "auth": self.headers.get("Authorization")})
            behaviour = server.behaviour
        if behaviour == "slow":
            server.stopping.wait(server.slow_seconds)
        if behaviour == "500":
            self._send(500, b'{"error": "boom, with secret details"}')
            return
        if behaviour == "malformed":
            self._send(200, b"<html>not json</html>")
            return
        if self.path.endswith("/embeddings"):
            reply = self._embeddings(request, behaviour)
        elif self.path.endswith("/rerank"):
            reply = self._rerank(request, behaviour)
        else:
            self._send(404, b"{}")
            return
        body = json.dumps(reply, allow_nan=True).encode()
        self._send(200, body, drip=0.05 if behaviour == "drip" else 0.0)

    def _embeddings(self, request: dict[str, Any], behaviour: str) -> Any:
        texts = request["input"]
        vectors = [embed(t, self.server.dimensions) for t in texts]
        if behaviour == "wrong_dimensions":
            vectors = [v + [0.0] for v in vectors]
        if behaviour == "nan":
            vectors[-1][3] = float("nan")
        if behaviour == "zero":
            vectors[0] = [0.0] * len(vectors[0])
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
        if behaviour == "missing_item":
            data = data[:-1]
        if behaviour == "bad_index":
            data[0]["index"] = len(data) + 5
        if behaviour == "strings":
            data[0]["embedding"] = ["0.1"] * len(vectors[0])
        if behaviour == "no_data":
            return {"object": "list"}
        data.reverse()  # indices, not order, say which vector is which
        return {"object": "list", "data": data, "model": request.get("model")}

    def _rerank(self, request: dict[str, Any], behaviour: str) -> Any:
        documents = request["documents"]
        scores = [overlap_score(request["query"], d) for d in documents]
        if behaviour == "nan":
            scores[0] = float("nan")
        results = [{"index": i, "relevance_score": s} for i, s in enumerate(scores)]
        if behaviour == "bad_index":
            results[0]["index"] = len(results)
        if behaviour == "missing_item":
            results = results[:-1]
        shape = self.server.shape
        results.sort(key=lambda r: -r["relevance_score"] if math.isfinite(r["relevance_score"]) else 0)
        if shape == "data":
            return {"data": results}
        if shape == "list":
            return [{"index": r["index"], "score": r["relevance_score"]} for r in results]
        if shape == "scores":
            return {"scores": scores}
        return {"id": "x", "results": results}


class ModelServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, dimensions: int = DIMENSIONS) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.dimensions = dimensions
        self.behaviour = "ok"
        self.shape = "results"
        self.slow_seconds = 5.0
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def texts_embedded(self) -> list[str]:
        with self.lock:
            return [t for r in self.requests if r["path"].endswith("/embeddings") for t in r["body"]["input"]]

    def stop(self) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()
