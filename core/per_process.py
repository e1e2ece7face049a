"""One object per process (a sender thread, the lease keeper), made on first use and made
again in a forked child (a Celery prefork worker), where the parent's threads do not exist."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerProcess(Generic[T]):
    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._pid = 0
        self._object: T | None = None

    def get(self) -> T:
        found = self._object
        if found is None or self._pid != os.getpid():
            with self._lock:
                if self._object is None or self._pid != os.getpid():
                    self._object, self._pid = self._make(), os.getpid()
                found = self._object
        return found

    def made(self) -> T | None:
        """This process's object if it was made, without making it."""
        return self._object if self._pid == os.getpid() else None
