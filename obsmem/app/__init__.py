"""The application floor: :class:`Obsmem`, the composition root every surface and the eval harness use.

It sits above the stages (it builds the pipeline, the indexer and the searchers) and below the surfaces
(HTTP, CLI, agent tools, MCP) and the eval harness, which call it. Nothing in the base or in a stage
imports it.
"""

from obsmem.app.service import Obsmem

__all__ = ["Obsmem"]
