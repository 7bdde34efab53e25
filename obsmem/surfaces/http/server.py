"""``serve(settings)``: run the HTTP API (and the MCP endpoint) with uvicorn.

Without API keys the server only binds to a loopback address, and says so in the log; asked to bind
anything else without keys it refuses with a :class:`ConfigurationError` (the CLI prints it and exits
non-zero) before opening a socket.

Connection hygiene is configured here and in the app: uvicorn closes idle connections after
``server.keep_alive_seconds``; its protocol class (:mod:`~obsmem.surfaces.http.protocol`) bounds a new
connection's idle time and a request head's arrival too; the app bounds the body, the connections and
requests in flight (it reads the server's count of open connections), failed authentication and streams.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import sys

import uvicorn

from obsmem.app import Obsmem
from obsmem.errors import ConfigurationError, ObsmemError
from obsmem.settings import Settings, load_settings
from obsmem.surfaces.http.access_log import logging_config
from obsmem.surfaces.http.app import create_app
from obsmem.surfaces.http.protocol import protocol_class

logger = logging.getLogger("obsmem.http")


def is_loopback_host(host: str) -> bool:
    if host.strip().lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(settings: Settings) -> None:
    """Refuse to serve without keys on anything but loopback."""
    host = settings.server.host
    if not settings.auth_enabled and not is_loopback_host(host):
        raise ConfigurationError(
            f"refusing to listen on {host!r} without API keys: add [[api_keys]] to the settings file "
            "(or OBSMEM_API_KEYS), or bind a loopback address such as 127.0.0.1"
        )


def _log_setup() -> None:
    if not logging.getLogger().handlers and not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def uvicorn_config(app: object, settings: Settings) -> uvicorn.Config:
    server = settings.server
    return uvicorn.Config(
        app,  # type: ignore[arg-type]
        host=server.host,
        port=server.port,
        loop="auto",  # uvloop when installed
        http=protocol_class(server.header_timeout_seconds),  # httptools when installed, with a head deadline
        timeout_keep_alive=server.keep_alive_seconds,  # type: ignore[arg-type]  # a float works: call_later
        lifespan="on",
        access_log=server.access_log,
        # The access log's request targets are redacted, the configured keys cut wherever they appear.
        log_config=logging_config([api_key.key.get_secret_value() for api_key in settings.api_keys]),
        server_header=False,
        proxy_headers=False,
        log_level="info",
    )


def serve(settings: Settings) -> None:
    """Serve until interrupted. Raises ConfigurationError for a bind that is not allowed."""
    check_bind(settings)
    _log_setup()
    where = f"{settings.server.host}:{settings.server.port}"
    if settings.auth_enabled:
        logger.info("obsmem: API keys required (%d configured); listening on %s", len(settings.api_keys), where)
    else:
        logger.warning("obsmem: no API keys configured: listening on loopback only (%s), without authentication", where)
    with Obsmem(settings) as service:
        app = create_app(service)
        server = uvicorn.Server(uvicorn_config(app, settings))
        connections = server.server_state.connections
        app.state.connections.bind(lambda: len(connections))
        server.run()


def main(argv: list[str] | None = None) -> int:
    """``python -m obsmem.surfaces.http``: the server without the CLI (used by tests and benchmarks)."""
    parser = argparse.ArgumentParser(prog="python -m obsmem.surfaces.http", description="Run the obsmem HTTP API.")
    parser.add_argument("--config", help="settings file")
    parser.add_argument("--data-dir", help="data directory")
    parser.add_argument("--host", help="interface to bind (overrides server.host)")
    parser.add_argument("--port", type=int, help="TCP port (overrides server.port)")
    args = parser.parse_args(argv)
    try:
        # Flags go through the settings model (a model_copy would skip its checks, such as the port's range).
        flags = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
        serve(load_settings(args.config, data_dir=args.data_dir, server=flags))
    except ObsmemError as exc:
        print(f"obsmem serve: {exc.code}: {exc.message}", file=sys.stderr)
        return 2
    return 0
