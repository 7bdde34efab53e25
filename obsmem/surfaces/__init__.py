"""The ways in: HTTP API, CLI, agent tools and MCP server.

They sit on top: each drives the application floor (:class:`obsmem.app.Obsmem`) and turns its typed
results into JSON or text at its own edge. Nothing below this package imports it.
"""
