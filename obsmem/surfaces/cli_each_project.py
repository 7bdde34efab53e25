"""Commands that go over every project (``status``, ``upgrade``): a project that fails is reported and the
others still answer.

One damaged database (``storage_corrupt``), or one a writer holds (``storage_busy``), is a fault of that
project alone; stopping at it used to hide every healthy project behind it. The failures are kept with
their codes, shown after the rest, and decide the exit status at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import click

from obsmem.errors import ObsmemError
from obsmem.surfaces.cli import exit_code

T = TypeVar("T")


@dataclass(frozen=True)
class ProjectFailure:
    """A project (or user tier) that could not be read or upgraded, with its error."""

    name: str
    error: ObsmemError

    def to_dict(self, key: str = "project") -> dict[str, str]:
        """The failure for ``--json``, its name under ``key`` (``owner`` for a user tier)."""
        return {key: self.name, "code": self.error.code, "message": self.error.message}

    def line(self) -> str:
        return f"{self.name}: error: {self.error.code}: {self.error.message}"


def each_project(names: Iterable[str], work: Callable[[str], T]) -> tuple[list[T], list[ProjectFailure]]:
    """``work(name)`` for every name, in order: the results of those that succeeded, and the failures."""
    done: list[T] = []
    failed: list[ProjectFailure] = []
    for name in names:
        try:
            done.append(work(name))
        except ObsmemError as exc:
            failed.append(ProjectFailure(name, exc))
    return done, failed


def exit_if_failed(failures: list[ProjectFailure]) -> None:
    """End the command with the exit status of the first failure (74 for a storage fault), if there was one."""
    if failures:
        raise click.exceptions.Exit(exit_code(failures[0].error))
