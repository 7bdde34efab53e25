"""A client for OpenAI-compatible chat completions with tool calling (llama.cpp, vLLM, Ollama, OpenAI...).

One :class:`ChatClient` per role (observer, reflector, dropper), built from the shared ``[model]``
settings with the role's overrides. What it promises:

- **The outbound policy of** :mod:`obsmem.outbound`: one overall deadline per call (``timeout_seconds``),
  here covering every retry and the backoff sleeps too; no redirects (a 3xx is an error, so the key is
  never sent anywhere but the configured host); a response size cap (8 MiB); the key only in the
  Authorization header.
- **Bounded retries** (``max_retries``) on HTTP 429, 5xx and connection failures, with exponential
  backoff and ``Retry-After`` honoured when it fits in the deadline. Other 4xx answers are not retried.
- **No prompt, memory or response text in logs or errors**: log lines carry the role, attempt, status
  and duration; errors carry a stable code and the HTTP status at most.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import httpx

from obsmem.errors import ModelBadResponse, ModelNotConfigured, ModelRejected, ModelTimeout, ModelUnavailable
from obsmem.outbound import Endpoint, OutboundError, Reply
from obsmem.settings import ModelSettings

log = logging.getLogger("obsmem.pipeline.llm")

MiB = 1024 * 1024
MAX_RESPONSE_BYTES = 8 * MiB
CONNECT_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as the model wrote it (may be malformed: the caller checks)


@dataclass(frozen=True)
class ChatReply:
    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    def as_message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation for the next round."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content or ""}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in self.tool_calls
            ]
        return message


@runtime_checkable
class ChatModel(Protocol):
    """What every model stage needs of a model: one chat completion with tools, in the OpenAI shape.

    :class:`ChatClient` is the one for a configured endpoint. Anything else with this method (an adapter
    over an agent framework's own models, routed to one project with
    :meth:`~obsmem.pipeline.clients.ModelClients.route`) serves the Observer, Reflector and Dropper the
    same way: it raises the model errors of :mod:`obsmem.errors` (``ModelUnavailable``, ...) on failure.
    ``context_window_tokens`` (``None``: the configured one) sizes the stage's requests.
    """

    context_window_tokens: int | None

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
    ) -> ChatReply: ...


class ChatClient:
    """Chat completions against one endpoint for one role. Thread-safe; reuse it across calls.

    The transport policy (deadline, no redirects, size cap, key placement) is :mod:`obsmem.outbound`'s;
    this class adds what is particular to chat completions: retries and the model errors.
    """

    def __init__(
        self,
        model: ModelSettings,
        *,
        role: str,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not model.base_url or not model.model_id:
            raise ModelNotConfigured(f"no model is configured for the {role}: set model.base_url and model.model_id")
        self.model = model
        self.role = role
        self.context_window_tokens: int | None = model.context_window_tokens
        self._sleep = sleep
        key = model.api_key.get_secret_value() if model.api_key is not None else None
        self._endpoint = Endpoint(
            f"{model.base_url}/chat/completions",
            timeout_seconds=model.timeout_seconds,
            api_key=lambda: key,
            max_response_bytes=MAX_RESPONSE_BYTES,
            connect_timeout_seconds=CONNECT_TIMEOUT_SECONDS,
            label=f"the {role} model",
            transport=transport,
        )

    def close(self) -> None:
        self._endpoint.close()

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
    ) -> ChatReply:
        """One chat completion, retried on transient failures, within the overall deadline."""
        payload: dict[str, Any] = {"model": self.model.model_id, "messages": list(messages), "stream": False}
        if tools:
            payload["tools"] = list(tools)
            if tool_choice is not None:
                payload["tool_choice"] = tool_choice
        if self.model.temperature is not None:
            payload["temperature"] = self.model.temperature
        if self.model.max_output_tokens is not None:
            payload["max_tokens"] = self.model.max_output_tokens
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")

        timeout = self.model.timeout_seconds
        deadline = time.monotonic() + timeout
        attempt = 0
        while True:
            attempt += 1
            started = time.monotonic()
            retry_after: float | None = None
            try:
                reply = self._attempt(body, deadline)
            except OutboundError as exc:
                error = self._failure(exc, attempt, deadline)
            else:
                elapsed_ms = (time.monotonic() - started) * 1000
                log.info(
                    "model call role=%s attempt=%d status=%d duration_ms=%d bytes=%d",
                    self.role,
                    attempt,
                    reply.status,
                    elapsed_ms,
                    len(reply.body),
                )
                if reply.status == 200:
                    return self._parse(reply.body)
                if reply.status != 429 and reply.status < 500:
                    raise ModelRejected(f"the {self.role} model endpoint answered HTTP {reply.status}")
                error = ModelUnavailable(
                    f"the {self.role} model endpoint answered HTTP {reply.status} after {attempt} tries"
                )
                retry_after = _retry_after_seconds(reply.headers.get("retry-after"))
            if attempt > self.model.max_retries:
                raise error
            delay = self.model.retry_backoff_seconds * (2 ** (attempt - 1)) * random.uniform(0.8, 1.2)
            if retry_after is not None:
                delay = max(delay, retry_after)
            if time.monotonic() + delay >= deadline:
                raise error
            self._sleep(delay)

    def _attempt(self, body: bytes, deadline: float) -> Reply:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise OutboundError("timeout", "deadline reached before the attempt", "")
        return self._endpoint.send(body, within=remaining)

    def _failure(self, exc: OutboundError, attempt: int, deadline: float) -> ModelUnavailable:
        """The model error for a failed attempt: raised at once unless it is worth retrying (returned)."""
        timeout = self.model.timeout_seconds
        if exc.stage == "too_large":
            cap = MAX_RESPONSE_BYTES // MiB
            raise ModelBadResponse(f"the {self.role} model's reply is larger than {cap} MiB") from None
        if exc.stage == "timeout" or time.monotonic() >= deadline:
            log.warning("model call role=%s attempt=%d: deadline of %ss reached", self.role, attempt, timeout)
            raise ModelTimeout(f"the {self.role} model did not answer within {timeout:g} s") from None
        log.warning("model call role=%s attempt=%d failed: %s", self.role, attempt, exc.cause)
        return ModelUnavailable(f"the {self.role} model endpoint is unreachable ({exc.cause})")

    def _parse(self, raw: bytes) -> ChatReply:
        problem = ModelBadResponse(f"the {self.role} model's reply is not an OpenAI-compatible chat completion")
        try:
            document = json.loads(raw)
            choice = document["choices"][0]
            message = choice["message"]
        except (ValueError, KeyError, IndexError, TypeError, RecursionError):  # Recursion: nested too deep
            raise problem from None
        if not isinstance(message, dict) or not isinstance(message.get("tool_calls") or [], list):
            raise problem
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            content = _text_parts(content)
        content = None if content is None else _encodable(content)
        calls: list[ToolCall] = []
        for index, call in enumerate(message.get("tool_calls") or []):
            if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
                raise problem
            function = call["function"]
            arguments = function.get("arguments", "")
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, ensure_ascii=False)
            raw_id = call.get("id")
            call_id = raw_id if isinstance(raw_id, str) and raw_id else f"call_{index}"
            name = function.get("name") if isinstance(function.get("name"), str) else ""
            calls.append(ToolCall(_encodable(call_id), _encodable(name), _encodable(arguments)))
        usage = document.get("usage") if isinstance(document.get("usage"), dict) else {}
        return ChatReply(
            content=content,
            tool_calls=calls,
            finish_reason=choice.get("finish_reason") if isinstance(choice.get("finish_reason"), str) else None,
            prompt_tokens=_int_or_none(usage.get("prompt_tokens")),
            completion_tokens=_int_or_none(usage.get("completion_tokens")),
        )


def _encodable(text: str) -> str:
    """``text`` with every lone surrogate (a ``\\ud800`` escape in the reply's JSON) replaced by U+FFFD. The
    reply goes back to the model in the next request, which is encoded as UTF-8 and cannot hold one; an
    item whose own text holds one is refused by its check, with a reason the model can act on."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _text_parts(content: Any) -> str | None:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _retry_after_seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # HTTP-date form: fall back to our own backoff
    return seconds if 0 <= seconds <= 3600 else None
