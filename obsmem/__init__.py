"""obsmem: observational memory for AI agents.

The base package (settings, storage, ids, errors, ingestion). The Python API is :class:`Obsmem`, from the
application floor (:mod:`obsmem.app`)::

    from obsmem import Obsmem
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from obsmem.version import __version__

if TYPE_CHECKING:
    from obsmem.app import Obsmem


def __getattr__(name: str) -> Any:
    # Lazy, so importing the base (as every stage does) never pulls in the application floor above it.
    if name == "Obsmem":
        from obsmem.app import Obsmem

        return Obsmem
    raise AttributeError(name)


__all__ = ["Obsmem", "__version__"]
