"""Secret redaction on text written to be slow for it: time per megabyte must not grow with the text.

    python benchmarks/redaction_worst_case.py [--sizes 200000,1000000,2000000] [--repeats 3] [--shapes a,b]

Every event's text, and every item an Observer or Reflector writes, passes secret redaction
(``obsmem.redaction``) before it is stored. An event may hold 2,000,000 characters, and its text comes from
whoever the agent reads: a web page, a log, a hostile file. A detector whose regular expression backtracks,
or that starts a scan over the rest of the text at each of many positions, turns one such event into minutes
of CPU on the write path. This script times ``redact_text`` on texts repeating the shapes that did that:

- ``password_open``: ``password=<`` repeated (a secret word before a value that looks like a placeholder);
- ``password``: ``password=`` repeated (one long value full of secret words);
- ``authorization``: ``authorization=`` repeated;
- ``user_option``: ``--user=a:`` repeated (the ``-u user:password`` detector);
- ``dotted_url``: a long ``a.a.a...`` run, then `` @ ://`` (the URL detector, which runs on a text holding
  both);
- ``separators``: ``token`` then a long run of `` : `` with no hex after it (the hex-after-a-word detector);
- ``private_key``: an unterminated private-key block cut by ``redacted_prefix`` at 20,000 characters;
- ``glued``: Google keys (exactly 35 characters after ``AIza``) each glued to the last, so every key but the first
  is found only where the one before it ends;
- ``prose``: ordinary log lines holding one token each, for comparison.

For each shape and size it prints the median seconds of ``--repeats`` runs and the seconds per megabyte
(one JSON document). Linear detectors give about the same seconds per megabyte at every size.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

from obsmem import redaction
from obsmem.redaction import redact_text

CUT = 20_000


def repeated(unit: str) -> Callable[[int], str]:
    return lambda size: (unit * (size // len(unit) + 1))[:size]


def dotted_url(size: int) -> str:
    return repeated("a.")(size - 6) + " @ ://"


def separators(size: int) -> str:
    return "token" + repeated(" :")(size - 5)


def private_key(size: int) -> str:
    return "-----BEGIN RSA PRIVATE KEY-----\n" + repeated("MIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7\n")(size)


def prose(size: int) -> str:
    line = "2026-03-04 10:22:01 INFO worker started job 4411 with token ghp_" + "A1b2C3d4E5f6G7h8I9j0" * 2 + "\n"
    return repeated(line)(size)


SHAPES: dict[str, Callable[[int], str]] = {
    "password_open": repeated("password=<"),
    "password": repeated("password="),
    "authorization": repeated("authorization="),
    "user_option": repeated("--user=a:"),
    "dotted_url": dotted_url,
    "separators": separators,
    "private_key": private_key,
    "glued": repeated("AIza" + "b" * 35),
    "prose": prose,
}


def timed(shape: str, text: str) -> float:
    started = time.perf_counter()
    if shape == "private_key":
        redaction.redacted_prefix(text, CUT)
    else:
        redact_text(text)
    return time.perf_counter() - started


def runs_here(shape: str) -> bool:
    """Whether the code imported can time ``shape``: run against an earlier obsmem (``PYTHONPATH`` at its
    checkout, to compare in one session) that lacks ``redacted_prefix``, its shape is reported as null."""
    return shape != "private_key" or hasattr(redaction, "redacted_prefix")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="200000,1000000,2000000", help="text lengths in characters")
    parser.add_argument("--repeats", type=int, default=3, help="runs per shape and size; the median is kept")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="the shapes to time, comma-separated")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    shapes = args.shapes.split(",")
    unknown = sorted(set(shapes) - set(SHAPES))
    if unknown:
        parser.error(f"unknown shapes: {', '.join(unknown)} (known: {', '.join(SHAPES)})")
    results: dict[str, dict[str, dict[str, float]] | None] = {}
    for shape in shapes:
        make = SHAPES[shape]
        if not runs_here(shape):
            results[shape] = None
            continue
        timings: dict[str, dict[str, float]] = {}
        results[shape] = timings
        for size in sizes:
            text = make(size)
            seconds = statistics.median(timed(shape, text) for _ in range(args.repeats))
            timings[str(size)] = {
                "seconds": round(seconds, 4),
                "seconds_per_mb": round(seconds / (size / 1_000_000), 4),
            }
    print(json.dumps({"repeats": args.repeats, "sizes": sizes, "results": results}, indent=2))


if __name__ == "__main__":
    main()
