"""A waterfall: one row per span (a step, a wait, a lost attempt) on one time axis."""

from __future__ import annotations

from collections.abc import Sequence

from django.utils.html import escape
from django.utils.safestring import SafeString

from core.charts.base import Series, Span, figure, millis, nice_ceiling
from core.charts.base import empty as nothing_to_draw
from core.charts.base import key as css_key

# Labels on the left, the time axis from PLOT_FROM to PLOT_TO percent of the width.
ROW, AXIS = 24, 22
PLOT_FROM, PLOT_TO = 36.0, 98.0
LABEL_CHARS = 22
MIN_WIDTH = 0.35  # percent: a 3 ms step on a 30 s axis still shows


def waterfall(
    *,
    id: str,
    title: str,
    description: str,
    spans: Sequence[Span],
    total_ms: float,
    kinds: Sequence[Series],
    empty: str,
) -> SafeString:
    """One row per span on a shared time axis from 0 to `total_ms`, each labelled with how long
    it took, and a table of the same (what, from, to, took, note)."""
    if not spans:
        return nothing_to_draw(id, title, empty)
    total = max(total_ms, max(s.end_ms for s in spans), 1.0)
    scale = (PLOT_TO - PLOT_FROM) / total
    height = AXIS + ROW * len(spans) + 4
    shapes = _time_axis(total, scale, height)
    shapes += [_span_row(AXIS + ROW * i, span, scale) for i, span in enumerate(spans)]
    rows = "".join(
        f'<tr><th scope="row">{escape(s.label)}</th>'
        f'<td class="num">+{escape(millis(s.start_ms))}</td>'
        f'<td class="num">{escape(millis(s.ms))}{" so far" if s.ongoing else ""}</td>'
        f"<td>{escape(s.note)}</td></tr>"
        for s in spans
    )
    table = (
        '<table><thead><tr><th scope="col">What</th><th scope="col" class="num">Starts at</th>'
        '<th scope="col" class="num">Took</th><th scope="col">Detail</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>"
    )
    present = {s.kind for s in spans}
    legend = [k for k in kinds if k.key in present]
    return figure(id, title, description, "waterfall", shapes, legend, table, height=height)


def _span_row(y: int, span: Span, scale: float) -> str:
    """A span's row: its label at the left, its bar on the axis, how long it took."""
    start = PLOT_FROM + span.start_ms * scale
    width = max(span.ms * scale, MIN_WIDTH)
    key = css_key(span.kind)
    label = span.label
    if len(label) > LABEL_CHARS:
        label = label[: LABEL_CHARS - 1] + "…"
    took = millis(span.ms) + (" so far" if span.ongoing else "")
    tip = f"{span.label}: {took}, from +{millis(span.start_ms)}"
    if span.note:
        tip += f" ({span.note})"
    return (
        f'<g class="span s-{key}{" ongoing" if span.ongoing else ""}" data-series="{key}" '
        f'data-value="{span.ms:.1f}" data-start="{span.start_ms:.1f}">'
        f"<title>{escape(tip)}</title>"
        f'<text class="row-label" x="0" y="{y + 16}">{escape(label)}</text>'
        f'<rect class="bar s-{key}" x="{start:.3f}%" y="{y + 5}" width="{width:.3f}%" '
        f'height="{ROW - 9}" rx="2"/>'
        f"{_took_label(took, start, start + width, y)}</g>"
    )


def _time_axis(total: float, scale: float, height: int) -> list[str]:
    """Ticks at a round step (at most five of them) along the top, with gridlines down."""
    step = nice_ceiling(total / 5)
    shapes = []
    tick = 0.0
    while tick <= total * (1 + 1e-9):
        x = PLOT_FROM + tick * scale
        anchor = "end" if x > 92 else "middle" if tick else "start"
        shapes.append(
            f'<line class="grid" x1="{x:.3f}%" y1="{AXIS - 4}" x2="{x:.3f}%" y2="{height}"/>'
        )
        shapes.append(
            f'<text class="tick" x="{x:.3f}%" y="{AXIS - 8}" text-anchor="{anchor}">'
            f"{escape('0' if not tick else millis(tick).replace('.0 ', ' '))}</text>"
        )
        tick += step
    return shapes


def _took_label(took: str, start: float, end: float, y: int) -> str:
    """How long, after the bar if there is room, before it if not, else inside its end."""
    if end <= 84:
        x, dx, anchor, where = end, 4, "start", ""
    elif start >= 52:
        x, dx, anchor, where = start, -4, "end", ""
    else:
        x, dx, anchor, where = end, -4, "end", " inside"
    return (
        f'<text class="took{where}" x="{x:.3f}%" dx="{dx}" y="{y + 16}" '
        f'text-anchor="{anchor}">{escape(took)}</text>'
    )
