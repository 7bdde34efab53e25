"""Failed authentication is rate limited per client address (a token bucket per address).

Each address may fail ``server.auth_failures_per_minute`` times in a burst; the allowance refills at that
rate. While an address has no allowance left, every request from it that needs a key is answered
``429 rate_limited`` with ``Retry-After`` *before its key is looked at*: a guesser learns nothing from a
limited request, a right guess included. Behind a reverse proxy every client shares the proxy's address.
The table is bounded: when it is full the least recently failed address is forgotten.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

MAX_TRACKED_ADDRESSES = 10_000


class FailureLimiter:
    def __init__(
        self,
        per_minute: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_addresses: int = MAX_TRACKED_ADDRESSES,
    ) -> None:
        self.burst = float(per_minute)
        self.refill_per_second = per_minute / 60.0
        self.clock = clock
        self.max_addresses = max_addresses
        # address -> (allowance left, when it was computed)
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def _allowance(self, address: str, now: float) -> float:
        entry = self._buckets.get(address)
        if entry is None:
            return self.burst
        left, then = entry
        return min(self.burst, left + (now - then) * self.refill_per_second)

    def retry_after(self, address: str) -> int:
        """Whole seconds until ``address`` may try again; 0 when it may try now."""
        now = self.clock()
        left = self._allowance(address, now)
        if left >= 1.0:
            return 0
        return max(1, math.ceil((1.0 - left) / self.refill_per_second))

    def record_failure(self, address: str) -> None:
        now = self.clock()
        left = self._allowance(address, now) - 1.0
        self._buckets[address] = (max(left, 0.0), now)
        self._buckets.move_to_end(address)
        while len(self._buckets) > self.max_addresses:
            self._buckets.popitem(last=False)
