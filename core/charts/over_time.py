"""Bars per bucket (stacked by series) and lines through buckets, on a time axis or any other
row of buckets."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from django.utils.html import escape
from django.utils.safestring import SafeString

from core.charts.base import (
    BASE,
    HEIGHT,
    LEFT,
    RIGHT,
    TOP,
    Point,
    Series,
    count,
    figure,
    millis,
    nice_ceiling,
)
from core.charts.base import empty as nothing_to_draw
from core.charts.base import key as css_key


def bar_chart(
    *,
    id: str,
    title: str,
    description: str,
    series: Sequence[Series],
    points: Sequence[Point],
    empty: str,
    axis: str = "Period",
    label_every: int = 1,
    number: Callable[[float | None], str] = count,
) -> SafeString:
    """Bars per bucket, stacked by series (bottom first), with a table of the same numbers;
    only `empty` (and the title) when every value is zero."""
    totals = [sum(v or 0 for v in p.values.values()) for p in points]
    if not any(totals):
        return nothing_to_draw(id, title, empty)
    whole = number is count
    top = nice_ceiling(max(totals), whole=whole)
    shapes, ticks = _grid(top, number, whole=whole)
    slot = (RIGHT - LEFT) / len(points)
    for i, point in enumerate(points):
        x, width, below = LEFT + slot * (i + 0.14), slot * 0.72, float(BASE)
        for s in series:
            value = point.values.get(s.key) or 0
            if value <= 0:
                continue
            height = value / top * (BASE - TOP)
            below -= height
            tip = f"{point.title}: {number(value)} {s.label.lower()}"
            shapes.append(
                f'<rect class="bar s-{css_key(s.key)}" x="{x:.3f}%" y="{below:.2f}" '
                f'width="{width:.3f}%" height="{height:.2f}" data-series="{css_key(s.key)}" '
                f'data-bucket="{escape(point.title)}" data-value="{value:g}">'
                f"<title>{escape(tip)}</title></rect>"
            )
    shapes += ticks + _x_labels(points, slot, label_every)
    return figure(
        id,
        title,
        description,
        "bars",
        shapes,
        series,
        _table(axis, series, points, number, total=True),
    )


def line_chart(
    *,
    id: str,
    title: str,
    description: str,
    series: Sequence[Series],
    points: Sequence[Point],
    empty: str,
    axis: str = "Period",
    label_every: int = 1,
    number: Callable[[float | None], str] = millis,
) -> SafeString:
    """A line per series through the buckets that have a value (gaps where they have none),
    with a table of the same numbers; only `empty` when no bucket has a value."""
    values = [v for p in points for v in p.values.values() if v is not None]
    if not values:
        return nothing_to_draw(id, title, empty)
    top = nice_ceiling(max(values))
    shapes, ticks = _grid(top, number, whole=False)
    slot = (RIGHT - LEFT) / len(points)

    def where(i: int, value: float) -> tuple[float, float]:
        return LEFT + slot * (i + 0.5), BASE - value / top * (BASE - TOP)

    for s in series:
        key = css_key(s.key)
        previous: tuple[float, float] | None = None
        for i, point in enumerate(points):
            value = point.values.get(s.key)
            if value is None:
                previous = None
                continue
            x, y = where(i, value)
            if previous is not None:
                shapes.append(
                    f'<line class="line s-{key}" x1="{previous[0]:.3f}%" y1="{previous[1]:.2f}" '
                    f'x2="{x:.3f}%" y2="{y:.2f}"/>'
                )
            previous = (x, y)
            tip = f"{point.title}: {s.label} {number(value)}"
            shapes.append(
                f'<circle class="dot s-{key}" cx="{x:.3f}%" cy="{y:.2f}" r="3.5" '
                f'data-series="{key}" data-bucket="{escape(point.title)}" data-value="{value:g}">'
                f"<title>{escape(tip)}</title></circle>"
            )
    shapes += ticks + _x_labels(points, slot, label_every)
    return figure(
        id,
        title,
        description,
        "lines",
        shapes,
        series,
        _table(axis, series, points, number, total=False),
    )


def _grid(
    top: float, number: Callable[[float | None], str], *, whole: bool
) -> tuple[list[str], list[str]]:
    """The baseline and gridlines at half and all of `top`, and their labels at the left
    (drawn last, over the data, on a halo)."""
    lines = [f'<line class="axis" x1="{LEFT}%" y1="{BASE}" x2="{RIGHT}%" y2="{BASE}"/>']
    labels = []
    for value in [top] if whole and top < 2 else [top / 2, top]:
        y = BASE - value / top * (BASE - TOP)
        lines.append(f'<line class="grid" x1="{LEFT}%" y1="{y:.2f}" x2="{RIGHT}%" y2="{y:.2f}"/>')
        labels.append(
            f'<text class="tick" x="{LEFT}%" y="{y - 4:.2f}">{escape(number(value))}</text>'
        )
    return lines, labels


def _x_labels(points: Sequence[Point], slot: float, every: int) -> list[str]:
    """Every `every`-th bucket's label, counted back from the newest (always labelled). When
    every bucket is labelled, every other one is `minor`: a phone's stylesheet hides those."""
    shapes = []
    step = max(1, every)
    for n, i in enumerate(range(len(points) - 1, -1, -step)):
        x = LEFT + slot * (i + 0.5)
        anchor = "start" if x < 4 else "end" if x > 96 else "middle"
        minor = " minor" if step == 1 and len(points) > 5 and n % 2 else ""
        shapes.append(
            f'<text class="tick{minor}" x="{x:.3f}%" y="{HEIGHT - 8}" text-anchor="{anchor}">'
            f"{escape(points[i].label)}</text>"
        )
    return shapes


def _table(
    axis: str,
    series: Sequence[Series],
    points: Sequence[Point],
    number: Callable[[float | None], str],
    *,
    total: bool,
) -> str:
    head = "".join(f'<th scope="col" class="num">{escape(s.label)}</th>' for s in series)
    if total:
        head += '<th scope="col" class="num">Total</th>'
    rows = []
    for p in points:
        cells = "".join(
            f'<td class="num">{escape(number(p.values.get(s.key)))}</td>' for s in series
        )
        if total:
            cells += (
                f'<td class="num">{escape(number(sum(v or 0 for v in p.values.values())))}</td>'
            )
        rows.append(f'<tr><th scope="row">{escape(p.title)}</th>{cells}</tr>')
    return (
        f'<table><thead><tr><th scope="col">{escape(axis)}</th>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
