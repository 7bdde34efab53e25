"""Chat clients per role (observer, reflector, dropper), with the run-time model switches applied."""

from __future__ import annotations

import threading

import httpx

from obsmem.pipeline.llm import ChatClient
from obsmem.pipeline.model_overrides import Override, model_with_override
from obsmem.settings import ModelSettings, Settings


class ModelClients:
    """One :class:`ChatClient` per role and model configuration, built on first use and reused.

    A client is keyed by the role's whole effective configuration, so switching a role's model (an
    override) gives the next job a client for the new model while a running job keeps its own.
    """

    def __init__(self, settings: Settings, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.settings = settings
        self.transport = transport
        self._clients: dict[tuple[str, str], ChatClient] = {}
        self._lock = threading.Lock()

    def model(self, role: str, override: Override | None = None) -> ModelSettings:
        return model_with_override(self.settings, role, override)

    def get(self, role: str, override: Override | None = None) -> ChatClient:
        model = self.model(role, override)
        key = (role, model.model_dump_json())
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = ChatClient(model, role=role, transport=self.transport)
                self._clients[key] = client
            return client

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()
