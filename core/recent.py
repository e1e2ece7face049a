"""A value per key computed at most once per interval in this process, and shared by every
caller meanwhile: the live feeds read a tenant's counts once per event or per interval, not
once per watching socket."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class Recent(Generic[V]):
    """Values by key, each kept `seconds` from when it was made (at most `size` keys: the
    oldest go first)."""

    def __init__(self, seconds: float, size: int = 4096) -> None:
        self.seconds = seconds
        self.size = size
        self._lock = threading.Lock()
        self._values: dict[Hashable, tuple[float, V]] = {}

    def get(self, key: Hashable, make: Callable[[], V], *, seconds: float | None = None) -> V:
        """The value kept for `key` if made less than `seconds` (default: the instance's) ago,
        else `make()`'s, kept."""
        now = time.monotonic()
        with self._lock:
            found = self._values.get(key)
        fresh_for = self.seconds if seconds is None else seconds
        if found is not None and now - found[0] < fresh_for:
            return found[1]
        value = make()
        self.put(key, value)
        return value

    def put(self, key: Hashable, value: V) -> None:
        """Keep `value` for `key` from now (a caller that had to read it afresh anyway)."""
        with self._lock:
            self._values.pop(key, None)
            self._values[key] = (time.monotonic(), value)
            while len(self._values) > self.size:
                del self._values[next(iter(self._values))]

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
