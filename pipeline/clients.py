"""Chat clients per role (observer, reflector, dropper), with the run-time model switches applied.

A project can also route a role to a model of its own (:meth:`ModelClients.route`): any
:class:`~obsmem.pipeline.llm.ChatModel`, such as an adapter over an agent framework's models. A routed
role needs no ``[model]`` endpoint, and its jobs in that project call the routed model instead of one.
"""

from __future__ import annotations

import threading

import httpx

from obsmem.pipeline.llm import ChatClient, ChatModel
from obsmem.pipeline.model_overrides import ROLES, Override, model_with_override
from obsmem.settings import ModelSettings, Settings

# Why a role has no model, in the words an observe or reflect request is refused with: what to set.
NO_MODEL = "no [model] is configured: set base_url and model_id under [model] in the settings file"


class ModelClients:
    """One :class:`ChatClient` per role and model configuration, built on first use and reused.

    A client is keyed by the role's whole effective configuration, so switching a role's model (an
    override) gives the next job a client for the new model while a running job keeps its own.
    """

    def __init__(self, settings: Settings, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.settings = settings
        self.transport = transport
        self._clients: dict[tuple[str, str], ChatClient] = {}
        self._routes: dict[tuple[str, str], list[ChatModel]] = {}  # newest last
        self._lock = threading.Lock()

    def route(self, project: str, role: str, model: ChatModel | None) -> None:
        """Send ``role``'s calls for ``project`` to ``model`` from the next job on (``None``: the settings, whatever
        was routed)."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}")
        with self._lock:
            if model is None:
                self._routes.pop((project, role), None)
            else:
                self._routes.setdefault((project, role), []).append(model)

    def unroute(self, project: str, role: str, model: ChatModel) -> None:
        """Stop routing ``role`` of ``project`` to ``model``. Several integrations may route one project's role
        (two agents' capabilities): the newest route still in place serves it, so one that ends never takes
        the role from another that is still running; with none left, the settings serve it."""
        with self._lock:
            routes = [routed for routed in self._routes.get((project, role), []) if routed is not model]
            if routes:
                self._routes[(project, role)] = routes
            else:
                self._routes.pop((project, role), None)

    def routed(self, project: str | None, role: str) -> ChatModel | None:
        if project is None or not self._routes:
            return None
        routes = self._routes.get((project, role))
        return routes[-1] if routes else None

    def model(self, role: str, override: Override | None = None, *, project: str | None = None) -> ModelSettings:
        model = model_with_override(self.settings, role, override)
        routed = self.routed(project, role)
        if routed is not None and routed.context_window_tokens is not None:
            model = model.model_copy(update={"context_window_tokens": routed.context_window_tokens})
        return model

    def get(self, role: str, override: Override | None = None, *, project: str | None = None) -> ChatModel:
        routed = self.routed(project, role)
        if routed is not None:
            return routed
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
            self._routes.clear()
