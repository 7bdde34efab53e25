"""The ways in: the Python service facade, HTTP API, CLI, agent tools and MCP server.

Nothing below this package imports it; it imports the stages.
"""
