"""The observation pipeline: events -> Observer -> Reflector -> Dropper -> generations -> the projection.

Layout (each wing imports only itself and the floor; the views read the wings; the runtime wires them; the
contracts ``pipeline-wings`` and ``pipeline-inside`` of pyproject.toml keep it so)::

    runtime.py        ObservationPipeline: the append trigger, the job handlers, housekeeping, reads
    observe/          the observe wing: input hygiene, packer, Observer, coverage, the observe job, prompts
    reflect/          the reflect wing: pool, Reflector, Dropper, generations, the reflect job, prompts
    views/            status, details, the instant projection (read-only)
    the floor         memory items, activity writes, session jobs, tokens, receipts, the model client
                      (llm, clients, toolloop, model_overrides)

The names below are what other layers (the surfaces, the eval harness, benchmarks) may import; everything
else is internal to the pipeline and may move.
"""

from obsmem.pipeline.llm import ChatClient, ChatModel, ChatReply, ToolCall
from obsmem.pipeline.memory_items import MemoryItem, active_memory
from obsmem.pipeline.model_overrides import ROLES, ModelChanges, RoleModel
from obsmem.pipeline.observe.prompts import seq_runs
from obsmem.pipeline.reflect.generations import project_generation_totals, rebuild_active_memory
from obsmem.pipeline.runtime import ObservationPipeline
from obsmem.pipeline.session_jobs import OBSERVE, REFLECT
from obsmem.pipeline.tokens import estimate_tokens
from obsmem.pipeline.views.projection import Projection, project, render_projection

__all__ = [
    "OBSERVE",
    "REFLECT",
    "ROLES",
    "ChatClient",
    "ChatModel",
    "ChatReply",
    "MemoryItem",
    "ModelChanges",
    "ObservationPipeline",
    "Projection",
    "RoleModel",
    "ToolCall",
    "active_memory",
    "estimate_tokens",
    "project",
    "project_generation_totals",
    "rebuild_active_memory",
    "render_projection",
    "seq_runs",
]
