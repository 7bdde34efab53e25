"""Synthetic but realistic memory corpora for benchmarks: one-line coding-agent observations.

Lines mix common words, file paths with line numbers, CamelCase identifiers, ticket numbers, versions
and error names, the way an observer writes them. A few planted identifiers (``MapToolArguments``,
``#2510``) occur only a handful of times, so "rare identifier" queries have a known answer size.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime, timedelta

WORDS = [
    "fix",
    "test",
    "error",
    "deploy",
    "user",
    "config",
    "cache",
    "retry",
    "timeout",
    "login",
    "session",
    "token",
    "migration",
    "schema",
    "index",
    "query",
    "build",
    "release",
    "review",
    "refactor",
    "parser",
    "client",
    "server",
    "worker",
    "queue",
    "handler",
    "request",
    "response",
    "latency",
    "memory",
    "payment",
    "invoice",
    "billing",
    "export",
    "import",
    "report",
    "dashboard",
    "alert",
    "metric",
    "log",
    "trace",
    "span",
    "auth",
    "permission",
    "role",
]
VERBS = (
    "Fixed",
    "Added",
    "Removed",
    "Refactored",
    "Investigated",
    "Decided to keep",
    "Reverted",
    "Documented",
    "User asked to change",
    "Benchmarked",
    "Renamed",
    "Split",
    "Profiled",
    "Upgraded",
)
PARTS = (
    "Map",
    "Tool",
    "Retry",
    "Policy",
    "Invoice",
    "Session",
    "Token",
    "Cache",
    "Query",
    "Index",
    "Worker",
    "Handler",
    "Parser",
    "Report",
    "Export",
    "Schema",
    "Client",
    "Config",
    "Alert",
    "Metric",
    "Span",
)
SUFFIXES = ("Arguments", "Builder", "Manager", "Factory", "Error", "Service", "Store", "Result", "State", "Spec")
DIRS = ("src/api", "src/billing", "src/auth", "src/jobs", "src/db", "tests/unit", "tests/e2e", "web/components", "cli")
ERRORS = ("KeyError", "TimeoutError", "ValueError", "IntegrityError", "ConnectionResetError", "AssertionError")
PLANTED = ("MapToolArguments", "#2510")
PLANTED_EVERY = 10_000  # one planted identifier per this many rows


def identifier(rng: random.Random) -> str:
    # Two or three parts and a suffix; common parts keep most identifiers far from unique.
    parts = rng.sample(PARTS, rng.randint(2, 3))
    name = "".join(parts) + rng.choice(SUFFIXES)
    return name if name not in PLANTED else "RetryPolicyBuilder"


def line(rng: random.Random, index: int) -> str:
    path = f"{rng.choice(DIRS)}/{rng.choice(WORDS)}_{rng.choice(WORDS)}.py:{rng.randint(1, 900)}"
    words = " ".join(rng.sample(WORDS, rng.randint(3, 7)))
    choice = rng.random()
    if index % PLANTED_EVERY == PLANTED_EVERY // 2:
        planted = PLANTED[(index // PLANTED_EVERY) % len(PLANTED)]
        return f"{rng.choice(VERBS)} {planted} in {path} after {words}"
    ticket = f"#{rng.randint(3000, 99999)}"  # never collides with the planted #2510
    if choice < 0.3:
        return f"{rng.choice(VERBS)} {identifier(rng)} in {path}: {words}"
    if choice < 0.55:
        return f"{rng.choice(ERRORS)} in {identifier(rng)}.{rng.choice(WORDS)}() at {path} during {words}"
    if choice < 0.75:
        release = f"v{rng.randint(1, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}"
        return f"{rng.choice(VERBS)} {words} for ticket {ticket}, release {release}"
    return f"{rng.choice(VERBS)} the {words} path; see {path} and {identifier(rng)}"


def rows(count: int, seed: int = 7, sessions: int = 200) -> Iterator[tuple[str, str, str]]:
    """``(session_id, stored date, content)``, dates ascending over about two years."""
    rng = random.Random(seed)
    start = datetime(2025, 1, 1)
    step = timedelta(minutes=max(1, (2 * 365 * 24 * 60) // max(count, 1)))
    for index in range(count):
        date = (start + step * index).strftime("%Y-%m-%d %H:%M:00")
        yield f"session-{rng.randrange(sessions):04d}", date, line(rng, index)
