"""Stacked horizontal bars: the parts of a whole side by side, one bar per row (a model call's
tokens by section: what was sent, what was left out), all rows on one scale."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from django.utils.html import escape
from django.utils.safestring import SafeString

from core.charts.base import LEFT, RIGHT, Point, Series, count, figure
from core.charts.base import empty as nothing_to_draw
from core.charts.base import key as css_key

# Each row: its label on a line of its own above the bar, so the bar keeps the whole width
# on a phone. Percent of the plot: a part this wide is named inside it; narrower, in its tip.
ROW, LABEL, BAR = 44, 14, 18
MIN_WIDTH = 0.5  # percent: a 3-token part of 3,000 still shows
INSIDE = 16.0
INSIDE_ON_PHONES = 30.0


def stacked_rows(
    *,
    id: str,
    title: str,
    description: str,
    series: Sequence[Series],
    rows: Sequence[Point],
    empty: str,
    unit: str = "",
    number: Callable[[float | None], str] = count,
    table: str | None = None,
) -> SafeString:
    """One bar per row, its parts stacked left to right in `series` order, every row on the
    scale of the longest; `table` replaces the default table (series × rows)."""
    totals = [sum(v or 0 for v in r.values.values()) for r in rows]
    if not any(totals):
        return nothing_to_draw(id, title, empty)
    scale = (RIGHT - LEFT) / max(totals)
    suffix = f" {unit}" if unit else ""
    shapes = []
    for i, (row, total) in enumerate(zip(rows, totals, strict=True)):
        y = ROW * i
        shapes.append(
            f'<text class="row-label" x="{LEFT}%" y="{y + LABEL - 2}">{escape(row.title)}</text>'
        )
        x = LEFT
        for s in series:
            value = row.values.get(s.key) or 0
            if value <= 0:
                continue
            width = max(value * scale, MIN_WIDTH)
            share = value / total * 100
            tip = f"{row.label}: {s.label}, {number(value)}{suffix} ({share:.0f}%)"
            shapes.append(_part(s, value, x, y + LABEL, width, tip))
            x += width
    present = {k for r in rows for k, v in r.values.items() if v}
    legend = [s for s in series if s.key in present]
    if table is None:
        table = _table(rows, number, legend)
    height = ROW * len(rows) - (ROW - LABEL - BAR) + 2
    return figure(id, title, description, "stacked", shapes, legend, table, height=height)


def _part(s: Series, value: float, x: float, y: int, width: float, tip: str) -> str:
    key = css_key(s.key)
    name = ""
    if width >= INSIDE:
        minor = " minor" if width < INSIDE_ON_PHONES else ""
        name = (
            f'<text class="part-name{minor}" x="{x + 0.8:.3f}%" y="{y + BAR - 5}">'
            f"{escape(s.label)}</text>"
        )
    return (
        f'<g class="part s-{key}" data-series="{key}" data-value="{value:g}">'
        f"<title>{escape(tip)}</title>"
        f'<rect class="bar s-{key}" x="{x:.3f}%" y="{y}" width="{width:.3f}%" height="{BAR}" '
        f'rx="2"/>{name}</g>'
    )


def _table(
    rows: Sequence[Point],
    number: Callable[[float | None], str],
    shown: Sequence[Series],
) -> str:
    head = "".join(f'<th scope="col" class="num">{escape(r.label)}</th>' for r in rows)
    body = "".join(
        f'<tr><th scope="row">{escape(s.label)}</th>'
        + "".join(f'<td class="num">{escape(number(r.values.get(s.key)))}</td>' for r in rows)
        + "</tr>"
        for s in shown
    )
    return (
        f'<table><thead><tr><th scope="col">Part</th>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )
