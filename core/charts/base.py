"""The parts every chart shares: what a series, a point and a span are, how numbers are
written, and the frame (a figure with an accessible SVG, a legend and a table)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

# Bars and lines: the plot spans these percentages of the width, and these pixels of height.
LEFT, RIGHT = 0.5, 99.5
HEIGHT, TOP, BASE = 184, 18, 156


@dataclass(frozen=True)
class Series:
    """One kind of value: `key` names its CSS class (`s-<key>`), `label` what people read."""

    key: str
    label: str


@dataclass(frozen=True)
class Point:
    """One bucket of a time axis: its short axis label, its full name, its value per series
    (None: nothing to measure there, which a line chart leaves as a gap)."""

    label: str
    title: str
    values: Mapping[str, float | None]


@dataclass(frozen=True)
class Span:
    """One bar of a waterfall, in milliseconds from the start of the axis."""

    label: str
    kind: str
    start_ms: float
    end_ms: float
    note: str = ""
    ongoing: bool = False  # still going: it ends "now"

    @property
    def ms(self) -> float:
        return max(0.0, self.end_ms - self.start_ms)


def count(value: float | None) -> str:
    """12, 1,204."""
    return "—" if value is None else f"{value:,.0f}"


def millis(value: float | None) -> str:
    """0.4 ms, 47 ms, then as `seconds`: the one way a duration is written, in charts and on
    every page (the `duration` and `ms_duration` filters)."""
    if value is None:
        return "—"
    value = max(0.0, float(value))
    if value < 10:
        return f"{value:.1f} ms"
    if value < 1000:
        return f"{value:.0f} ms"
    return seconds(value / 1000)


def seconds(value: float | None) -> str:
    """0.4 s, 12.3 s, 47 s, 4 min 05 s, 2 h 03 min, 3 d 4 h."""
    if value is None:
        return "—"
    value = max(0.0, float(value))
    if value < 10:
        return f"{value:.1f} s"
    if value < 60:
        return f"{value:.0f} s"
    minutes, rest = divmod(int(value), 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    return f"{hours // 24} d {hours % 24} h"


def nice_ceiling(value: float, *, whole: bool = False) -> float:
    """The smallest of 1, 2, 2.5, 5 × 10^k at or above `value` (1 for nothing); for counts
    (`whole`), of 1, 2, 4, 6, 8 × 10^k, whose halves are whole numbers too."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 4, 6, 8, 10) if whole else (1, 2, 2.5, 5, 10):
        if step * power >= value * (1 - 1e-9):
            return step * power
    return 10 * power


def figure(
    id: str,
    title: str,
    description: str,
    kind: str,
    shapes: list[str],
    legend: Sequence[Series],
    table: str,
    *,
    height: int = HEIGHT,
) -> SafeString:
    chart = key(id)
    keys = "".join(
        f'<li><span class="swatch s-{key(s.key)}" aria-hidden="true"></span>{escape(s.label)}</li>'
        for s in legend
    )
    return mark_safe(  # noqa: S308 - every value above is escaped
        f'<figure class="chart chart-{kind}" id="{chart}">'
        f'<figcaption class="chart-title">{escape(title)}</figcaption>'
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart-svg" role="img" width="100%" '
        f'height="{height}" aria-labelledby="{chart}-title {chart}-desc">'
        f'<title id="{chart}-title">{escape(title)}</title>'
        f'<desc id="{chart}-desc">{escape(description)}</desc>'
        f"{''.join(shapes)}</svg>"
        f'<ul class="chart-legend">{keys}</ul>'
        f'<details class="chart-table"><summary>The numbers as a table</summary>{table}</details>'
        "</figure>"
    )


def empty(id: str, title: str, text: str) -> SafeString:
    chart = key(id)
    return mark_safe(  # noqa: S308 - escaped
        f'<figure class="chart chart-empty" id="{chart}">'
        f'<figcaption class="chart-title">{escape(title)}</figcaption>'
        f'<p class="chart-empty-note">{escape(text)}</p></figure>'
    )


def key(text: str) -> str:
    """A CSS class or id part: letters, digits, dashes and underscores only."""
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in str(text))
