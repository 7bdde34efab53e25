"""The one place obsmem's version is written: the package metadata (pyproject), ``obsmem --version``, the
HTTP API, the MCP server and outbound requests' User-Agent all read it.

A module of its own so the base and the stages can read it without importing the package root, which
re-exports the app floor.
"""

__version__ = "0.1.0"
