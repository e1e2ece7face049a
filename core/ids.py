"""Time-ordered ids: UUID version 7 (RFC 9562; PostgreSQL 18's `uuidv7()`): the first 48 bits
are the Unix time in milliseconds, the rest random. A run's id says when it was made, so its
per-run rows can be partitioned by the month of their run (core/partitions.py), and new ids
land at the right edge of an index rather than anywhere in it.
"""

from __future__ import annotations

import datetime as dt
import uuid

import uuid6


def uuid7() -> uuid.UUID:
    """A new version-7 UUID, as a plain uuid.UUID."""
    return uuid.UUID(int=uuid6.uuid7().int)


def lowest_at(moment: dt.datetime) -> uuid.UUID:
    """The smallest UUID a version-7 id made at `moment` (or later) can have: its time, then
    zeros. Ids made before `moment` all sort below it."""
    millis = int(moment.timestamp() * 1000)
    return uuid.UUID(int=millis << 80)


def time_of(value: uuid.UUID) -> dt.datetime:
    """When a version-7 id was made (to the millisecond)."""
    return dt.datetime.fromtimestamp((value.int >> 80) / 1000, dt.UTC)


def uuid7_at(moment: dt.datetime) -> uuid.UUID:
    """A version-7 UUID as one made at `moment` would be (its time, then random bits): for
    rows written as they were then (tests, benches, imports)."""
    random = uuid7().int & ((1 << 80) - 1)  # the version, variant and random bits
    return uuid.UUID(int=lowest_at(moment).int | random)
