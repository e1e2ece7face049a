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
        self._object: T | None = None
        os.register_at_fork(after_in_child=self._forget)

    def get(self) -> T:
        # Called on every step (the live sender, the lease keeper): a fork clears the object
        # through the hook __init__ registers, so no getpid() is asked here each time.
        found = self._object
        if found is None:
            with self._lock:
                if self._object is None:
                    self._object = self._make()
                found = self._object
        return found

    def _forget(self) -> None:
        """In a forked child: the parent's object (and its threads) are not ours."""
        self._lock = threading.Lock()
        self._object = None

    def made(self) -> T | None:
        """This process's object if it was made, without making it."""
        return self._object
