"""Stacked horizontal bars (core/charts/stacked.py) for known data: parts in series order, widths
in proportion on one scale for every row, tips and a table, no inline style. The SVG is parsed
as XML, not grepped."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from core import charts

SVG = "{http://www.w3.org/2000/svg}"
SERIES = [charts.Series("system", "System prompt"), charts.Series("memory", "Memories")]


def draw(*rows: charts.Point, **kwargs) -> ET.Element:
    html = charts.stacked_rows(
        id="bars",
        title="Tokens by section",
        description="What was sent.",
        series=SERIES,
        rows=list(rows),
        empty="Nothing was packed.",
        unit="tokens",
        **kwargs,
    )
    assert "style=" not in str(html)  # the CSP forbids inline styles
    return ET.fromstring(str(html))


def parts(figure: ET.Element) -> list[tuple[str, float, float]]:
    """(series, x, width) of every bar, in drawing order."""
    return [
        (g.get("data-series"), float(r.get("x")[:-1]), float(r.get("width")[:-1]))
        for g in figure.iter(f"{SVG}g")
        for r in g.iter(f"{SVG}rect")
    ]


def test_parts_are_stacked_in_series_order_with_widths_in_proportion():
    figure = draw(charts.Point("Sent", "Sent: 400 tokens", {"memory": 300, "system": 100}))
    [(first, x1, w1), (second, x2, w2)] = parts(figure)
    assert (first, second) == ("system", "memory")
    assert x2 == x1 + w1 and abs(w2 - 3 * w1) < 0.01
    assert abs((w1 + w2) - 99.0) < 0.01  # the longest row fills the plot
    tips = [t.text for t in figure.iter(f"{SVG}title")]
    assert "Sent: Memories, 300 tokens (75%)" in tips


def test_every_row_is_drawn_on_the_scale_of_the_longest():
    figure = draw(
        charts.Point("Sent", "Sent", {"system": 100}),
        charts.Point("Left out", "Left out", {"memory": 400}),
    )
    [(_, _, sent), (_, _, left)] = parts(figure)
    assert abs(left - 4 * sent) < 0.01


def test_a_wide_part_is_named_inside_and_a_tiny_one_still_shows():
    figure = draw(charts.Point("Sent", "Sent", {"system": 1, "memory": 999}))
    [(_, _, tiny), (_, _, wide)] = parts(figure)
    assert tiny >= 0.5
    names = [t.text for t in figure.iter(f"{SVG}text") if t.get("class", "").startswith("part")]
    assert names == ["Memories"]


def test_nothing_to_draw_says_so_and_a_given_table_replaces_the_default():
    empty = draw(charts.Point("Sent", "Sent", {"system": 0}))
    assert empty.find(".//p").text == "Nothing was packed."
    default = draw(charts.Point("Sent", "Sent", {"system": 5}))
    assert default.find(".//table/thead") is not None  # series × rows
    given = draw(charts.Point("Sent", "Sent", {"system": 5}), table='<table id="mine"/>')
    assert given.find(".//table").get("id") == "mine"
