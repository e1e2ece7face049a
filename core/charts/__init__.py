"""Charts as server-rendered SVG: bars over time (stacked by series), lines over time, a
waterfall of spans on one time axis, and stacked horizontal bars (parts of a whole).

No script and no library. Each chart is a `<figure>`: an inline `<svg role="img">` named by
its `<title>` and described in words by its `<desc>`, a legend, and the same numbers as a
table (the text alternative). Horizontal positions are percentages, so a chart fills its
column on a desktop and on a phone without shrinking its text; colours come from CSS classes
(`.s-<series key>`, static/css/app.css), so they follow the theme and need no inline style,
which the CSP forbids. Data attributes (`data-series`, `data-value`, `data-bucket`) say what
each shape stands for, for tests and for anyone reading the markup.
"""

from core.charts.base import (
    BASE,
    HEIGHT,
    LEFT,
    RIGHT,
    TOP,
    Point,
    Series,
    Span,
    count,
    millis,
    nice_ceiling,
    seconds,
)
from core.charts.over_time import bar_chart, line_chart
from core.charts.periods import PERIODS, Period, period_named
from core.charts.stacked import stacked_rows
from core.charts.waterfall import MIN_WIDTH, PLOT_FROM, PLOT_TO, waterfall

__all__ = [
    "BASE",
    "HEIGHT",
    "LEFT",
    "MIN_WIDTH",
    "PERIODS",
    "PLOT_FROM",
    "PLOT_TO",
    "RIGHT",
    "TOP",
    "Period",
    "Point",
    "Series",
    "Span",
    "bar_chart",
    "count",
    "line_chart",
    "millis",
    "seconds",
    "nice_ceiling",
    "period_named",
    "stacked_rows",
    "waterfall",
]
