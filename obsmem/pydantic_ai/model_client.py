"""A pydantic-ai model as the pipeline's Observer, Reflector or Dropper.

The pipeline's stages talk the OpenAI chat shape to a :class:`~obsmem.pipeline.ChatModel`
(``complete(messages, tools=..., tool_choice=...)``) from worker threads. :class:`PydanticAIChatModel`
translates one such call into pydantic-ai messages and tool definitions, runs the model's request on an
event loop of its own (workers are threads without one, and a model's HTTP client must stay on one loop),
and translates the response back. The pipeline never learns that pydantic-ai is involved; routing a
role to this adapter is :meth:`obsmem.Obsmem.route_model`.

Failures become the pipeline's model errors (``model_timeout``, ``model_rejected``, ``model_unavailable``)
carrying the exception's type only: a provider's message may quote the prompt, so it is never copied.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import CancelledError as FutureCancelled
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from pydantic_ai.direct import model_request
from pydantic_ai.exceptions import ModelHTTPError, UnexpectedModelBehavior, UserError
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters, infer_model
from pydantic_ai.tools import ToolDefinition

from obsmem.errors import ModelBadResponse, ModelRejected, ModelTimeout, ModelUnavailable
from obsmem.pipeline import ChatReply, ToolCall

log = logging.getLogger("obsmem.pydantic_ai.model")

DEFAULT_TIMEOUT_SECONDS = 120.0
CLOSE_TIMEOUT_SECONDS = 5.0


def resolve_model(model: Model | str) -> Model:
    """A pydantic-ai model from a model or a model name (``"openai:gpt-4o-mini"``)."""
    return model if isinstance(model, Model) else infer_model(model)


class PydanticAIChatModel:
    """One pipeline role served by one pydantic-ai model. Thread-safe: each call is handed to the adapter's own
    event loop, where concurrent calls run interleaved.

    The loop's thread owns the loop from start to end: it runs it, and when it stops, cancels what is still
    on it and closes it. :meth:`close` ends the calls in flight at once (a memory shutting down);
    :meth:`retire` lets them finish first (a model switch)."""

    def __init__(
        self,
        model: Model | str,
        *,
        role: str,
        context_window_tokens: int | None = None,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        self.model = resolve_model(model)
        self.role = role
        self.context_window_tokens = context_window_tokens or self.model.context_window
        self.timeout_seconds = timeout_seconds
        self._loop = asyncio.new_event_loop()
        # Held while a call is handed to the loop, when it ends, and while closing: a call is either handed
        # over and known (``_in_flight``), so closing cancels it, or refused; never left on a stopped loop.
        self._handover = threading.Lock()
        self._in_flight: set[Future[Any]] = set()
        self._closed = False
        self._retiring = False
        running = threading.Event()
        self._loop.call_soon(running.set)
        self._thread = threading.Thread(target=self._serve, name=f"obsmem-{role}-model", daemon=True)
        self._thread.start()
        running.wait(CLOSE_TIMEOUT_SECONDS)  # a call handed over before the loop runs would wait unseen

    @property
    def model_id(self) -> str:
        return self.model.model_name

    def _serve(self) -> None:
        """The loop's thread: run the loop until it is stopped, then cancel what is left on it and close it."""
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            try:
                self._loop.run_until_complete(_shut_down(self._loop))
            except Exception as exc:  # noqa: BLE001 - shutting down: nothing left to report it to but the log
                log.warning("model role=%s: shutting its loop down failed (%s)", self.role, type(exc).__name__)
            finally:
                self._loop.close()

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
    ) -> ChatReply:
        """One chat completion through the pydantic-ai model, within ``timeout_seconds``."""
        history = to_pydantic_messages(messages)
        parameters = ModelRequestParameters(
            function_tools=[_tool_definition(tool) for tool in tools or ()],
            allow_text_output=True,
        )
        with self._handover:
            if self._closed or self._retiring or not self._thread.is_alive():
                raise ModelUnavailable(f"the {self.role} model was closed")
            future = asyncio.run_coroutine_threadsafe(
                model_request(self.model, history, model_request_parameters=parameters), self._loop
            )
            self._in_flight.add(future)
        try:
            response = future.result(timeout=self.timeout_seconds)
        except FutureCancelled:
            raise ModelUnavailable(f"the {self.role} model was closed during the call") from None
        except FutureTimeout:
            future.cancel()
            raise ModelTimeout(f"the {self.role} model did not answer within {self.timeout_seconds:g} s") from None
        except ModelHTTPError as exc:
            log.warning("model call role=%s failed: HTTP %s", self.role, exc.status_code)
            if exc.status_code != 429 and exc.status_code < 500:
                raise ModelRejected(f"the {self.role} model answered HTTP {exc.status_code}") from None
            raise ModelUnavailable(f"the {self.role} model answered HTTP {exc.status_code}") from None
        except UnexpectedModelBehavior:
            raise ModelBadResponse(f"the {self.role} model's reply could not be read") from None
        except (UserError, Exception) as exc:  # noqa: BLE001 - any failure is the model's, named by type only
            log.warning("model call role=%s failed: %s", self.role, type(exc).__name__)
            raise ModelUnavailable(f"the {self.role} model failed ({type(exc).__name__})") from None
        finally:
            with self._handover:
                self._in_flight.discard(future)
                last_of_retired = self._retiring and not self._in_flight
            if last_of_retired:
                self.close()
        return to_chat_reply(response)

    def retire(self) -> None:
        """Refuse new calls and close once the calls in flight have ended: after a model switch, the job in
        flight finishes on the model it started with."""
        with self._handover:
            self._retiring = True
            idle = not self._in_flight
        if idle:
            self.close()

    def close(self) -> None:
        """Refuse new calls, end the ones in flight (their callers get ``model_unavailable`` at once rather
        than waiting out their timeout), and stop the loop; its thread cancels what is left and closes it.
        Returns when that is done (within a few seconds), whichever close started it, or at once when
        called on the loop's own thread."""
        with self._handover:
            first = not self._closed
            self._closed = True
            in_flight = list(self._in_flight) if first else []
        for future in in_flight:
            future.cancel()  # wakes its caller now, whatever the task does with its cancellation
        if first:
            # RuntimeError: closed in between by its thread (it had died), so there is nothing left to stop.
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=2 * CLOSE_TIMEOUT_SECONDS)
            if first and self._thread.is_alive():
                log.warning("model role=%s: its loop did not stop within %g s", self.role, 2 * CLOSE_TIMEOUT_SECONDS)


async def _shut_down(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel every other task on ``loop``, new ones included, and wait (bounded) until they have ended;
    then finalise its async generators, as ``asyncio.run`` does."""
    deadline = loop.time() + CLOSE_TIMEOUT_SECONDS
    while True:
        others = [task for task in asyncio.all_tasks(loop) if task is not asyncio.current_task()]
        if not others or loop.time() >= deadline:
            break
        for task in others:
            task.cancel()
        await asyncio.wait(others, timeout=max(0.0, deadline - loop.time()))
    await loop.shutdown_asyncgens()


def _tool_definition(tool: dict[str, Any]) -> ToolDefinition:
    function = tool["function"]
    return ToolDefinition(
        name=function["name"],
        description=function.get("description"),
        parameters_json_schema=function.get("parameters") or {"type": "object", "properties": {}},
    )


def to_pydantic_messages(messages: Sequence[dict[str, Any]]) -> list[ModelMessage]:
    """OpenAI chat messages as pydantic-ai messages: consecutive system/user/tool messages form one request."""
    result: list[ModelMessage] = []
    pending: list[ModelRequestPart] = []
    tool_names: dict[str, str] = {}

    def flush() -> None:
        if pending:
            result.append(ModelRequest(parts=list(pending)))
            pending.clear()

    for message in messages:
        role, content = message.get("role"), message.get("content") or ""
        if role == "system":
            pending.append(SystemPromptPart(content=content))
        elif role == "user":
            pending.append(UserPromptPart(content=content))
        elif role == "tool":
            call_id = str(message.get("tool_call_id") or "")
            pending.append(
                ToolReturnPart(tool_name=tool_names.get(call_id, "tool"), content=content, tool_call_id=call_id)
            )
        elif role == "assistant":
            flush()
            parts: list[TextPart | ToolCallPart] = [TextPart(content=content)] if content else []
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                tool_names[str(call.get("id"))] = str(function.get("name"))
                parts.append(
                    ToolCallPart(
                        tool_name=str(function.get("name")),
                        args=function.get("arguments") or "{}",
                        tool_call_id=str(call.get("id")),
                    )
                )
            result.append(ModelResponse(parts=parts))
    flush()
    return result


def to_chat_reply(response: ModelResponse) -> ChatReply:
    """A pydantic-ai response in the pipeline's shape: text, tool calls with JSON arguments, token usage."""
    texts = [part.content for part in response.parts if isinstance(part, TextPart)]
    calls = [
        ToolCall(
            id=part.tool_call_id or f"call_{index}",
            name=part.tool_name,
            arguments=part.args if isinstance(part.args, str) else json.dumps(part.args or {}, ensure_ascii=False),
        )
        for index, part in enumerate(p for p in response.parts if isinstance(p, ToolCallPart))
    ]
    usage = response.usage
    return ChatReply(
        content="".join(texts) if texts else None,
        tool_calls=calls,
        finish_reason=response.finish_reason,
        prompt_tokens=usage.input_tokens or None,
        completion_tokens=usage.output_tokens or None,
    )
