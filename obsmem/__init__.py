"""obsmem: observational memory for AI agents.

The base package (settings, storage, ids, errors, ingestion). The Python API is :class:`Obsmem`::

    from obsmem import Obsmem
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from obsmem.surfaces.service import Obsmem


def __getattr__(name: str) -> Any:
    # Lazy, so importing the base (as every stage does) never pulls in the surfaces.
    if name == "Obsmem":
        from obsmem.surfaces.service import Obsmem

        return Obsmem
    raise AttributeError(name)


__all__ = ["Obsmem", "__version__"]
