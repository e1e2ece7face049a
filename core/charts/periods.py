"""Time axes: the last 24 hours by hour, the last 7 days by day, in the current time zone."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.utils import timezone


@dataclass(frozen=True)
class Period:
    """A time axis: `count` buckets of one `bucket` ("hour" or "day"), the newest holding now."""

    key: str
    label: str
    bucket: str
    count: int
    label_every: int

    def starts(self, now: dt.datetime) -> list[dt.datetime]:
        """Where each bucket starts, oldest first, in the current time zone."""
        local = timezone.localtime(now).replace(tzinfo=None)
        if self.bucket == "hour":
            newest, step = local.replace(minute=0, second=0, microsecond=0), dt.timedelta(hours=1)
        else:
            newest = local.replace(hour=0, minute=0, second=0, microsecond=0)
            step = dt.timedelta(days=1)
        naive = [newest - step * (self.count - 1 - i) for i in range(self.count)]
        return [timezone.make_aware(start) for start in naive]

    def names(self, start: dt.datetime) -> tuple[str, str]:
        """A bucket's short axis label and its full name."""
        local = timezone.localtime(start)
        if self.bucket == "hour":
            end = local + dt.timedelta(hours=1)
            return local.strftime("%H:%M"), f"{local:%a %d %b, %H:%M}–{end:%H:%M}"
        return local.strftime("%a %d"), local.strftime("%a %d %b %Y")


PERIODS = {
    "24h": Period("24h", "the last 24 hours", "hour", 24, 6),
    "7d": Period("7d", "the last 7 days", "day", 7, 1),
}


def period_named(key: str | None) -> Period:
    """The period `key` names; the last 24 hours for anything else."""
    return PERIODS.get(key or "", PERIODS["24h"])
