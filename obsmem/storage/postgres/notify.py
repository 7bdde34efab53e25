"""Push for event followers on PostgreSQL: ``LISTEN/NOTIFY`` instead of polling.

A write that records a pipeline event also sends ``NOTIFY obsmem_events, '<project schema>'``
(:func:`obsmem.work.eventlog.record` sends it: the base may not import this package); PostgreSQL delivers it when that
transaction commits, to every listening connection of every server on the database, and never for a
rollback. :class:`EventSignal` holds one listening connection and a version per project schema that grows
with each notification, so a follower on any server learns of a new event at once:

1. ``token = signal.version(schema)``, then read the events after the last id it has seen;
2. if there are none, ``signal.wait(schema, token, timeout)`` returns as soon as a notification for the
   schema arrives after the token was taken (or at the timeout), and it reads again.

Taking the token before reading closes the race with an event committed in between. A notification says
only "something was recorded": the follower reads the event log for what, so a lost or merged
notification (PostgreSQL folds identical ones of one transaction) costs at most one ``timeout``.
"""

from __future__ import annotations

import contextlib
import threading
from collections import defaultdict

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
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="obsmem-event-signal", daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        while not self._stopping.is_set():
            try:
                for notice in self._conn.notifies(timeout=LISTEN_TICK_SECONDS):
                    with self._changed:
                        self._versions[notice.payload] += 1
                        self._changed.notify_all()
            except psycopg.Error:
                if self._stopping.is_set():
                    return
                # The connection broke: wake every follower so it reads (and polls) rather than waits.
                with self._changed:
                    for schema in list(self._versions):
                        self._versions[schema] += 1
                    self._changed.notify_all()
                self._stopping.wait(LISTEN_TICK_SECONDS)
                return

    @property
    def listening(self) -> bool:
        return self._thread.is_alive()

    def version(self, schema: str) -> int:
        with self._changed:
            return self._versions[schema]

    def wait(self, schema: str, token: int, timeout: float) -> bool:
        """Wait until an event of ``schema`` was notified after ``token`` was taken; False at the timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: self._versions[schema] != token, timeout=timeout)

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=5 * LISTEN_TICK_SECONDS)
        with contextlib.suppress(psycopg.Error):
            self._conn.close()
