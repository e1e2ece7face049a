"""What a question says about time, for ranking facts by when they happened (`occurred_at`).

"What did she buy last?" / "most recent", "latest": newer facts first. "first", "earliest",
"originally": older facts first. A month and year ("in May 2023") or a year ("in 2022"):
facts that happened then. Anything else: time does not weigh. Deliberately small and
predictable: English words, no parsing of relative dates ("last year" weighs nothing).
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
    years = [int(w) for w in words if w.isdigit() and 1900 <= int(w) <= 2200]
    if not years:
        return None
    year = years[0]
    month = next((MONTHS[w] for w in words if w in MONTHS and w != "may"), None)
    if month is None and "may" in words:  # "may" is a month only beside a year
        at = words.index("may")
        if any(w.isdigit() for w in words[at + 1 : at + 3]):
            month = 5
    if month is None:
        return _at(year, 1), _at(year + 1, 1)
    return _at(year, month), _at(year + (month == 12), month % 12 + 1)


def _at(year: int, month: int) -> dt.datetime:
    return dt.datetime(year, month, 1, tzinfo=dt.UTC)
