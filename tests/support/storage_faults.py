"""Real storage faults for the tests: a small tmpfs filled to the brim, a read-only bind mount, and an
SQLite VFS that fails reads or writes on demand.

Mounting needs root (or CAP_SYS_ADMIN); where the machine forbids it the tests skip and say why. Every
mount is unmounted in a ``finally``, whatever the test did.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest


def _run(*command: str) -> None:
    done = subprocess.run(list(command), capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise PermissionError(done.stderr.strip() or f"{command[0]} exited with {done.returncode}")


def _mount_or_skip(*command: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a file system needs root, and these tests run unprivileged here")
    try:
        _run(*command)
    except (PermissionError, FileNotFoundError) as exc:
        pytest.skip(f"this machine forbids mounting ({exc})")


def _unmount(target: Path) -> None:
    # Lazy: a connection a failed test left open must not leave the mount behind.
    subprocess.run(["umount", "-l", str(target)], capture_output=True, timeout=30)


@contextlib.contextmanager
def small_tmpfs(mount_point: Path, size: str = "4m") -> Iterator[Path]:
    mount_point.mkdir(parents=True, exist_ok=True)
    _mount_or_skip("mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mount_point))
    try:
        yield mount_point
    finally:
        _unmount(mount_point)


@contextlib.contextmanager
def read_only_view(source: Path, mount_point: Path) -> Iterator[Path]:
    """``source`` seen read-only at ``mount_point`` (a bind mount remounted read-only)."""
    mount_point.mkdir(parents=True, exist_ok=True)
    _mount_or_skip("mount", "--bind", str(source), str(mount_point))
    try:
        _run("mount", "-o", "remount,ro,bind", str(mount_point))
        yield mount_point
    finally:
        _unmount(mount_point)


def make_writable(mount_point: Path) -> None:
    """Remount a :func:`read_only_view` read-write (what an operator does once the fault is fixed)."""
    _run("mount", "-o", "remount,rw,bind", str(mount_point))


def fill(directory: Path) -> Path:
    """Write a file until the file system is full (to the last block); returns it (delete it to free)."""
    filler = directory / "filler.bin"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for chunk in (1 << 20, 1 << 16, 1 << 12, 1 << 9, 1):
            block = b"\0" * chunk
            while True:
                try:
                    if os.write(descriptor, block) < chunk:
                        break
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(descriptor)
    return filler


class FailingFile(apsw.VFSFile):
    """A database file whose reads or writes raise SQLITE_IOERR while its VFS says so."""

    def __init__(self, vfs: FailingVFS, name: object, flags: list[int]) -> None:
        super().__init__(FailingVFS.BASE, name, flags)
        self.vfs = vfs

    def xRead(self, amount: int, offset: int) -> bytes:  # noqa: N802 - the VFS method name
        if self.vfs.fail_reads:
            raise apsw.IOError("injected read error")
        return super().xRead(amount, offset)

    def xWrite(self, data: bytes, offset: int) -> None:  # noqa: N802 - the VFS method name
        if self.vfs.fail_writes:
            raise apsw.IOError("injected write error")
        super().xWrite(data, offset)


class FailingVFS(apsw.VFS):
    """The default VFS while registered: every connection opened meanwhile goes through it."""

    BASE = "unix"

    def __init__(self) -> None:
        self.fail_reads = False
        self.fail_writes = False
        super().__init__("obsmem-failing", base=self.BASE, makedefault=True)

    def xOpen(self, name: object, flags: list[int]) -> FailingFile:  # noqa: N802 - the VFS method name
        return FailingFile(self, name, flags)


@contextlib.contextmanager
def failing_vfs() -> Iterator[FailingVFS]:
    vfs = FailingVFS()
    try:
        yield vfs
    finally:
        vfs.fail_reads = vfs.fail_writes = False
        vfs.unregister()
