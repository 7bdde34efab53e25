"""Push for event followers on PostgreSQL: ``LISTEN/NOTIFY`` instead of polling.

A write that records a pipeline event also sends ``NOTIFY obsmem_events, '<project schema>'``
(:func:`obsmem.work.eventlog.record` sends it: the base may not import this package); PostgreSQL delivers it when that
transaction commits, to every listening connection of every server on the database, and never for a
rollback. :class:`EventSignal` holds one listening connection and a version per project schema that grows
with each notification, so a follower on any server learns of a new event at once:

1. ``token = signal.version(schema)``, then read the events after the last id it has seen;
2. if there are none, ``signal.wait(schema, token, timeout)`` returns as soon as a notification for the
   schema arrives after the token was taken (or at the timeout), and it reads again.

:meth:`wait_async` is the same wait for a coroutine (the HTTP event stream): it holds no thread while it
waits, the listening thread wakes it through its event loop.

Taking the token before reading closes the race with an event committed in between. A notification says
only "something was recorded": the follower reads the event log for what, so a lost or merged
notification (PostgreSQL folds identical ones of one transaction) costs at most one ``timeout``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import defaultdict
from collections.abc import Callable

import psycopg

CHANNEL = "obsmem_events"
# How often the listening thread checks whether it should stop.
LISTEN_TICK_SECONDS = 0.5


class EventSignal:
    """One listening connection for a process; followers wait on it per project schema."""

    def __init__(self, dsn: str, *, connect_seconds: float = 15.0) -> None:
        self._conn = psycopg.connect(dsn, autocommit=True, connect_timeout=max(1, int(connect_seconds)))
        self._conn.execute(f"LISTEN {CHANNEL}")
        self._versions: dict[str, int] = defaultdict(int)
        self._changed = threading.Condition()
        # Coroutines waiting per schema: each a function the listening thread calls to wake its loop.
        self._wakers: dict[str, set[Callable[[], None]]] = defaultdict(set)
        self._stopping = threading.Event()
        self._broken = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="obsmem-event-signal", daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        while not self._stopping.is_set():
            try:
                for notice in self._conn.notifies(timeout=LISTEN_TICK_SECONDS):
                    with self._changed:
                        self._versions[notice.payload] += 1
                        self._changed.notify_all()
                        wakers = list(self._wakers.get(notice.payload, ()))
                    _wake(wakers)
            except psycopg.Error:
                if self._stopping.is_set():
                    return
                # The connection broke: wake every follower so it reads (and polls) rather than waits. It is
                # no longer listening from here on: a woken follower that asked before the thread ended
                # went back to waiting on it, and the first event after the break came up to a timeout late.
                self._broken.set()
                with self._changed:
                    for schema in list(self._versions):
                        self._versions[schema] += 1
                    self._changed.notify_all()
                    wakers = [waker for schema_wakers in self._wakers.values() for waker in schema_wakers]
                _wake(wakers)
                self._stopping.wait(LISTEN_TICK_SECONDS)
                return

    @property
    def listening(self) -> bool:
        return self._thread.is_alive() and not self._broken.is_set()

    def version(self, schema: str) -> int:
        with self._changed:
            return self._versions[schema]

    def wait(self, schema: str, token: int, timeout: float) -> bool:
        """Wait until an event of ``schema`` was notified after ``token`` was taken; False at the timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: self._versions[schema] != token, timeout=timeout)

    async def wait_async(self, schema: str, token: int, timeout: float) -> bool:
        """:meth:`wait` for a coroutine: no thread is held while it waits."""
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits any more
                loop.call_soon_threadsafe(woken.set)

        with self._changed:
            if self._versions[schema] != token:
                return True
            self._wakers[schema].add(wake)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), timeout)
        finally:
            with self._changed:
                self._wakers[schema].discard(wake)
                if not self._wakers[schema]:
                    del self._wakers[schema]
        return self.version(schema) != token

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=5 * LISTEN_TICK_SECONDS)
        with contextlib.suppress(psycopg.Error):
            self._conn.close()


def _wake(wakers: list[Callable[[], None]]) -> None:
    for waker in wakers:
        waker()
