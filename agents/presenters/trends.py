"""The runs pages' and the console's pictures over time: runs created per hour or day by
status, and how long steps took (p50, p95). Each is one statement, scoped like the lists (a
member's own runs only); the charts themselves are core/charts/'s SVG."""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from agents.presenters.forms import ChartsFilterForm
from agents.runtime import selectors
from agents.runtime.models import WAITING
from core import charts
from core.htmx import is_partial, vary_on_htmx
from tenants.models import Scope
from tenants.permissions import require_scope
from tenants.principal import Principal

STATUS_SERIES = [
    charts.Series("succeeded", "Succeeded"),
    charts.Series("failed", "Failed"),
    charts.Series("cancelled", "Cancelled"),
    charts.Series("waiting", "Waiting"),
    charts.Series("running", "Running"),
    charts.Series("queued", "Queued"),
]
LATENCY_SERIES = [charts.Series("p50", "Median (p50)"), charts.Series("p95", "p95")]
_SERIES_OF = {s: "waiting" for s in WAITING}


@require_GET
@require_scope(Scope.READ)
def runs_charts_view(request: HttpRequest) -> HttpResponse:
    """The runs page's charts, which it loads after itself (so the list never waits for
    them); without htmx, the runs page showing the same period."""
    return charts_card(
        request, page="agents:runs", charts="agents:runs_charts", dom_id="runs-charts"
    )


def charts_card(request: HttpRequest, *, page: str, charts: str, dom_id: str) -> HttpResponse:
    """The "Over time" card of a runs page (`page`, a URL name), drawn for the period asked,
    or that page for the same period without htmx (the page says if the period is bad)."""
    filters = ChartsFilterForm(request.GET)
    if not is_partial(request):
        return redirect(reverse(page) + "?" + charts_query(request, filters))
    context = {
        "charts": runs_charts(request.principal, filters.chosen_period()),  # type: ignore[attr-defined]
        "chart_filters": filters,
        "charts_id": dom_id,
        "charts_url": reverse(charts),
        "page_url": reverse(page),
    }
    status = 200 if filters.is_valid() else 400
    return vary_on_htmx(render(request, "agents/_charts.html", context, status=status))


def charts_query(request: HttpRequest, filters: ChartsFilterForm) -> str:
    """The page's query for the period asked (as given, so that the page can refuse it)."""
    return urlencode({"period": request.GET.get("period") or filters.chosen_period()})


def runs_charts(principal: Principal, period_key: str | None = None) -> dict[str, Any]:
    """Runs over time by status, and step latency (p50, p95) over time, for the runs the
    principal may see: one statement each."""
    period = charts.period_named(period_key)
    now = timezone.now()
    starts = period.starts(now)
    counts = selectors.run_counts_over_time(principal, since=starts[0], bucket=period.bucket)
    latency = selectors.step_latency_over_time(principal, since=starts[0], bucket=period.bucket)
    return {
        "period": period,
        "periods": list(charts.PERIODS.values()),
        "as_of": now,
        "runs_chart": _runs_over_time(period, starts, counts),
        "latency_chart": _latency_over_time(period, starts, latency),
        "latency_sampled": latency.sampled < 1,
    }


def _runs_over_time(period: charts.Period, starts: list[dt.datetime], rows: list) -> Any:
    values: dict[dt.datetime, dict[str, float]] = {start: {} for start in starts}
    for start, status, n in rows:
        bucket = values.setdefault(start, {})
        key = _SERIES_OF.get(status, status)
        bucket[key] = bucket.get(key, 0) + n
    points = [charts.Point(*period.names(start), values[start]) for start in starts]
    total = {s.key: sum(values[start].get(s.key, 0) for start in starts) for s in STATUS_SERIES}
    busiest = max(starts, key=lambda start: sum(values[start].values()))
    words = ", ".join(f"{n:,.0f} {s.label.lower()}" for s in STATUS_SERIES if (n := total[s.key]))
    unit = period.bucket
    description = (
        f"{sum(total.values()):,.0f} runs created in {period.label}, by their status now: "
        f"{words}. The busiest {unit} was {period.names(busiest)[1]} with "
        f"{sum(values[busiest].values()):,.0f}."
    )
    return charts.bar_chart(
        id=f"runs-over-time-{period.key}",
        title=f"Runs created per {unit}, {period.label}",
        description=description,
        series=STATUS_SERIES,
        points=points,
        empty=f"No runs in this period ({period.label}).",
        axis=unit.capitalize(),
        label_every=period.label_every,
    )


def _latency_over_time(
    period: charts.Period, starts: list[dt.datetime], latency: selectors.Latency
) -> Any:
    found = {start: (p50, p95, n) for start, p50, p95, n in latency.rows}
    points = []
    for start in starts:
        p50, p95, _ = found.get(start, (None, None, 0))
        points.append(charts.Point(*period.names(start), {"p50": p50, "p95": p95}))
    steps = sum(n for _, _, n in found.values())
    description = f"{steps:,} successful steps of runs created in {period.label}"
    if latency.sampled < 1:
        description += (
            f" (the steps of a uniform sample of about {latency.sampled:.0%} of its "
            f"{latency.runs:,} runs)"
        )
    description += "."
    measured = [p for p in points if p.values["p95"] is not None]
    if measured:
        slowest = max(measured, key=lambda p: p.values["p95"] or 0)
        description += (
            f" The slowest {period.bucket} was {slowest.title}: median "
            f"{charts.millis(slowest.values['p50'])}, p95 {charts.millis(slowest.values['p95'])}."
        )
    return charts.line_chart(
        id=f"step-latency-{period.key}",
        title=f"Step time per {period.bucket} (p50 and p95), {period.label}",
        description=description,
        series=LATENCY_SERIES,
        points=points,
        empty=f"No steps ran in this period ({period.label}).",
        axis=period.bucket.capitalize(),
        label_every=period.label_every,
    )
