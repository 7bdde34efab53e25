"""Observational memory for pydantic-ai agents: ``from obsmem.pydantic_ai import ObservationalMemory``.

Installed with the ``pydantic-ai`` extra (``pip install 'obsmem[pydantic-ai]'``); nothing else in obsmem
imports pydantic-ai. See docs/pydantic-ai.md.

    capability.py   ObservationalMemory: observe, compact, thresholds, the last resort, events
    backends.py     one protocol, two ways in: an embedded Obsmem, or an obsmem server over HTTP
    messages.py     pydantic-ai messages as events with stable seqs (idempotent appends)
    compaction.py   the exact, safe cut and the message that replaces what it covers
    thresholds.py   thresholds relative to the model's context window
    events.py       om_* events at Mastra's parity, to a handler and async iterators
    model_client.py a pydantic-ai model as the pipeline's Observer, Reflector or Dropper
    tools.py        memory_search, recall and memory as pydantic-ai tools
    remote_notes.py the memory tool's writes over an obsmem server's notes routes
"""

from obsmem.pydantic_ai.backends import EmbeddedMemory, MemoryBackend, ObsmemClient, ProjectionView, RemoteMemory
from obsmem.pydantic_ai.capability import ObservationalMemory
from obsmem.pydantic_ai.events import CAPABILITY_EVENTS, PIPELINE_EVENTS, OMEvent
from obsmem.pydantic_ai.model_client import PydanticAIChatModel
from obsmem.pydantic_ai.thresholds import Thresholds
from obsmem.pydantic_ai.tools import MEMORY_TOOL_NAMES, memory_tools

__all__ = [
    "CAPABILITY_EVENTS",
    "MEMORY_TOOL_NAMES",
    "PIPELINE_EVENTS",
    "EmbeddedMemory",
    "MemoryBackend",
    "OMEvent",
    "ObservationalMemory",
    "ObsmemClient",
    "ProjectionView",
    "PydanticAIChatModel",
    "RemoteMemory",
    "Thresholds",
    "memory_tools",
]
