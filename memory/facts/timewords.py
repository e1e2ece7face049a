"""What a question says about time, for ranking facts by when they happened (`occurred_at`).

"What did she buy last?" / "most recent", "latest": newer facts first. "first", "earliest",
"originally": older facts first. A month and year ("in May 2023") or a year ("in 2022"):
facts that happened then; "before", "until" or "by" such a date: facts that happened earlier;
"after" it: later; "since" it: from its start on. Anything else: time does not weigh.
Deliberately small and predictable: English words, no parsing of relative dates ("last
year" weighs nothing, "before the trip" too).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

MONTHS = {
    name: number
    for number, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
LATEST = {"latest", "recent", "recently", "lately", "currently", "newest", "now", "last"}
EARLIEST = {"first", "earliest", "originally", "initially", "oldest"}
# A word right before the date (or its month) that opens the span on one side.
BEFORE = {"before", "until", "till", "by", "prior"}
AFTER = {"after"}
SINCE = {"since"}
EVER = (dt.datetime(1900, 1, 1, tzinfo=dt.UTC), dt.datetime(2201, 1, 1, tzinfo=dt.UTC))
UNITS = {"year", "month", "week", "day", "night", "time", "weekend", "summer", "winter"}
_WORD = re.compile(r"[a-z]+|\d{4}")


@dataclass(frozen=True)
class TimeIntent:
    mode: str = ""  # "", "latest", "earliest" or "between"
    since: dt.datetime | None = None
    until: dt.datetime | None = None


def time_intent(query: str) -> TimeIntent:
    words = _WORD.findall((query or "").lower())[:64]
    span = _span(words)
    if span is not None:
        return TimeIntent("between", *span)
    for i, word in enumerate(words):
        following = words[i + 1] if i + 1 < len(words) else ""
        if word in LATEST and following not in UNITS:  # "last year" is a date, not an order
            return TimeIntent("latest")
        if word in EARLIEST and following not in UNITS:
            return TimeIntent("earliest")
    return TimeIntent()


def _span(words: list[str]) -> tuple[dt.datetime, dt.datetime] | None:
    at = next((i for i, w in enumerate(words) if w.isdigit() and 1900 <= int(w) <= 2200), None)
    if at is None:
        return None
    year = int(words[at])
    month = next((MONTHS[w] for w in words if w in MONTHS and w != "may"), None)
    if month is None and "may" in words:  # "may" is a month only beside a year
        where = words.index("may")
        if any(w.isdigit() for w in words[where + 1 : where + 3]):
            month = 5
    if month is None:
        since, until = _at(year, 1), _at(year + 1, 1)
    else:
        since, until = _at(year, month), _at(year + (month == 12), month % 12 + 1)
    # The word before the date, or before its month ("before May 2023", "after 2022").
    start = at - 1 if month is None or at < 1 or words[at - 1] not in MONTHS else at - 2
    side = words[start] if start >= 0 else ""
    if side == "to" and start >= 1 and words[start - 1] == "prior":
        side = "prior"
    if side in BEFORE:
        return EVER[0], since
    if side in AFTER:
        return until, EVER[1]
    if side in SINCE:
        return since, EVER[1]
    return since, until


def _at(year: int, month: int) -> dt.datetime:
    return dt.datetime(year, month, 1, tzinfo=dt.UTC)
