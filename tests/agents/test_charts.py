"""Pictures where they beat text: the SVG charts (core/charts/) for known data, the runs and
step-latency charts of the runs page and the console (agents/presenters/trends.py), their endpoints'
roles, and that they count only the tenant's rows (a member's own).

The SVG is parsed, not grepped: every shape carries data-series / data-value / data-bucket.
"""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET

import pytest
from django.utils import timezone

from agents.presenters import trends
from agents.runtime import selectors
from agents.runtime.models import AgentSession, Checkpoint, Run
from core import charts
from tenants.scope import tenant_scope
from tests import factories
from tests.agents.console_helpers import make_run

SVG = "{http://www.w3.org/2000/svg}"
HX = {"HTTP_HX_REQUEST": "true"}


def parse(html: str) -> ET.Element:
    """The chart's <figure>, as XML (the markup is well-formed on purpose)."""
    return ET.fromstring(str(html))


def shapes(figure: ET.Element, tag: str) -> list[ET.Element]:
    return list(figure.iter(f"{SVG}{tag}"))


def values(figure: ET.Element, tag: str = "rect") -> dict[tuple[str, str], float]:
    return {
        (s.get("data-bucket"), s.get("data-series")): float(s.get("data-value"))
        for s in shapes(figure, tag)
        if s.get("data-series")
    }


def totals(figure: ET.Element) -> dict[str, float]:
    found: dict[str, float] = {}
    for (_, series), value in values(figure).items():
        found[series] = found.get(series, 0) + value
    return found


SERIES = [charts.Series("ok", "Succeeded"), charts.Series("bad", "Failed")]


def points(*rows: tuple[str, int, int]) -> list[charts.Point]:
    return [charts.Point(label, f"hour {label}", {"ok": ok, "bad": bad}) for label, ok, bad in rows]


# --- the SVG for known data -----------------------------------------------------------------------


def test_a_bar_chart_draws_one_bar_per_value_stacked_with_its_label_and_a_table():
    html = charts.bar_chart(
        id="demo",
        title="Runs per hour",
        description="6 runs.",
        series=SERIES,
        points=points(("10:00", 3, 1), ("11:00", 0, 0), ("12:00", 2, 0)),
        empty="No runs in this period.",
    )
    figure = parse(html)
    svg = figure.find(f"{SVG}svg")
    assert svg.get("role") == "img"
    assert svg.get("aria-labelledby") == "demo-title demo-desc"
    assert svg.find(f"{SVG}title").text == "Runs per hour"
    assert svg.find(f"{SVG}desc").text == "6 runs."
    assert values(figure) == {
        ("hour 10:00", "ok"): 3,
        ("hour 10:00", "bad"): 1,
        ("hour 12:00", "ok"): 2,
    }
    ok, bad = (r for r in shapes(figure, "rect") if r.get("data-bucket") == "hour 10:00")
    # The axis goes to 4 (a round number at or above the tallest bar): 3 + 1 fill it exactly.
    full = charts.BASE - charts.TOP
    assert float(ok.get("height")) == pytest.approx(full * 3 / 4)
    assert float(bad.get("height")) == pytest.approx(full / 4)
    assert float(bad.get("y")) + float(bad.get("height")) == pytest.approx(float(ok.get("y")))
    assert ok.find(f"{SVG}title").text == "hour 10:00: 3 succeeded"
    labels = [t.text for t in shapes(figure, "text")]
    assert "12:00" in labels and "4" in labels  # the newest bucket and the top gridline
    legend = [li.itertext() for li in figure.iter("li")]
    assert ["".join(t) for t in legend] == ["Succeeded", "Failed"]
    table = figure.find("details/table")
    assert [th.text for th in table.iter("th")][:4] == ["Period", "Succeeded", "Failed", "Total"]
    assert [td.text for td in table.find("tbody/tr").iter("td")] == ["3", "1", "4"]


def test_an_empty_period_says_so_honestly_and_draws_no_axes():
    html = charts.bar_chart(
        id="nothing",
        title="Runs per hour",
        description="",
        series=SERIES,
        points=points(("10:00", 0, 0), ("11:00", 0, 0)),
        empty="No runs in this period.",
    )
    figure = parse(html)
    assert figure.find(f"{SVG}svg") is None
    assert figure.find("p").text == "No runs in this period."
    assert "chart-empty" in figure.get("class")


def test_a_line_chart_leaves_a_gap_where_a_bucket_has_nothing_to_measure():
    series = [charts.Series("p50", "Median"), charts.Series("p95", "p95")]
    rows = [
        charts.Point("1", "one", {"p50": 10.0, "p95": 40.0}),
        charts.Point("2", "two", {"p50": None, "p95": None}),
        charts.Point("3", "three", {"p50": 20.0, "p95": 80.0}),
        charts.Point("4", "four", {"p50": 30.0, "p95": 100.0}),
    ]
    figure = parse(
        charts.line_chart(
            id="lat", title="Step time", description="", series=series, points=rows, empty="-"
        )
    )
    assert values(figure, "circle") == {
        ("one", "p50"): 10,
        ("one", "p95"): 40,
        ("three", "p50"): 20,
        ("three", "p95"): 80,
        ("four", "p50"): 30,
        ("four", "p95"): 100,
    }
    # One segment per series, from three to four: nothing joins one to three across the gap.
    assert len([x for x in shapes(figure, "line") if "line" in x.get("class")]) == 2
    assert "100 ms" in [t.text for t in shapes(figure, "text")]


def test_the_waterfall_puts_every_span_on_one_time_axis_with_how_long_it_took():
    spans = [
        charts.Span("Queued", "queued", 0, 100),
        charts.Span("Step 1 · model", "step", 100, 130),
        charts.Span("Waiting for approval", "approval", 130, 29_000, "issue_refund, approved"),
        charts.Span("Step 2 · tools", "step", 29_100, 29_200, ongoing=True),
    ]
    kinds = [charts.Series("step", "Step"), charts.Series("approval", "Approval")]
    kinds.append(charts.Series("queued", "Queued"))
    figure = parse(
        charts.waterfall(
            id="w",
            title="Time",
            description="",
            spans=spans,
            total_ms=30_000,
            kinds=kinds,
            empty="-",
        )
    )
    bars = [g.find(f"{SVG}rect") for g in shapes(figure, "g")]
    x = [float(b.get("x").rstrip("%")) for b in bars]
    scale = (charts.PLOT_TO - charts.PLOT_FROM) / 30_000
    assert x == pytest.approx([charts.PLOT_FROM + s.start_ms * scale for s in spans], abs=1e-3)
    wait = shapes(figure, "g")[2]
    assert wait.get("data-series") == "approval" and float(wait.get("data-value")) == 28_870
    assert wait.find(f"{SVG}title").text.startswith("Waiting for approval: 29 s, from +130 ms")
    tiny = bars[1]  # 30 ms of a 30 s axis is still drawn
    assert float(tiny.get("width").rstrip("%")) == charts.MIN_WIDTH
    took = [t.text for t in shapes(figure, "text") if "took" in (t.get("class") or "")]
    assert took == ["100 ms", "30 ms", "29 s", "100 ms so far"]
    assert "ongoing" in shapes(figure, "g")[3].get("class")
    assert [li.itertext() and "".join(li.itertext()) for li in figure.iter("li")] == [
        "Step",
        "Approval",
        "Queued",
    ]


def test_chart_text_is_escaped():
    rows = [charts.Point("<b>", "<script>", {"ok": 1, "bad": 0})]
    html = charts.bar_chart(
        id='x" onload="', title="<i>", description="&", series=SERIES, points=rows, empty="-"
    )
    assert "<script>" not in html and "<b>" not in html and "<i>" not in html
    parse(html)  # still well-formed


# --- the runs page's and the console's charts -----------------------------------------------------


def at(run: Run, when: dt.datetime, **fields) -> Run:
    with tenant_scope(run.tenant_id):
        Run.objects.for_tenant(run.tenant_id).filter(pk=run.pk).update(created_at=when, **fields)
    return run


def step_took(run: Run, seq: int, ms: float, when: dt.datetime) -> None:
    with tenant_scope(run.tenant_id):
        Checkpoint.objects.create(
            tenant_id=run.tenant_id,
            run=run,
            seq=seq,
            step="work",
            state={},
            schema_version=1,
            attempt=1,
            started_at=when,
            duration_ms=ms,
        )


@pytest.fixture
def now():
    return timezone.now()


@pytest.fixture
def history(tenant_a, tenant_b, now):
    """Runs of tenant A over the last day (and one older), and runs of tenant B."""
    ago = now - dt.timedelta(minutes=1)
    runs = {
        "ok1": at(make_run(tenant_a, status="succeeded", step_seq=0), ago),
        "ok2": at(make_run(tenant_a, status="succeeded", step_seq=0), ago),
        "failed": at(make_run(tenant_a, status="failed", step_seq=0), ago - dt.timedelta(hours=3)),
        "waits": at(make_run(tenant_a, status="waiting_approval", step_seq=0), ago),
        "old": at(make_run(tenant_a, status="succeeded", step_seq=0), now - dt.timedelta(days=3)),
    }
    for _ in range(4):
        at(make_run(tenant_b, status="failed", step_seq=0), ago)
    return runs


def chart_of(context, key: str) -> ET.Element:
    return parse(context[key])


def test_the_runs_chart_counts_the_tenants_runs_per_hour_by_status_now(members, history):
    admin = factories.principal_for(members["admin"])
    with tenant_scope(admin.tenant.pk):
        context = trends.runs_charts(admin, "24h")
    figure = chart_of(context, "runs_chart")
    assert totals(figure) == {"succeeded": 2, "failed": 1, "waiting": 1}  # not B's, not 3 days ago
    assert len(shapes(figure, "rect")) == 3  # this hour: succeeded + waiting; 3 h ago: failed
    newest = timezone.localtime(timezone.now()).strftime("%H:00")
    assert newest in [t.text for t in shapes(figure, "text")]
    desc = figure.find(f"{SVG}svg/{SVG}desc").text
    assert desc.startswith("4 runs created in the last 24 hours, by their status now: 2 succeeded")
    with tenant_scope(admin.tenant.pk):
        week = chart_of(trends.runs_charts(admin, "7d"), "runs_chart")
    assert totals(week) == {"succeeded": 3, "failed": 1, "waiting": 1}


def test_a_member_charts_only_their_own_runs_and_their_conversations(members, tenant_a, now):
    member = factories.principal_for(members["member"])
    own = make_run(tenant_a, status="succeeded", step_seq=0, created_by=members["member"].user)
    with tenant_scope(tenant_a.pk):
        session = AgentSession.objects.create(
            tenant=tenant_a, agent="console_shop", user=members["member"].user
        )
    talk = make_run(tenant_a, status="waiting_approval", step_seq=0, session=session)
    other = make_run(tenant_a, status="failed", step_seq=0, created_by=members["admin"].user)
    for run, ms in ((own, 10), (talk, 30), (other, 5000)):
        at(run, now - dt.timedelta(minutes=2))
        step_took(run, 1, ms, now - dt.timedelta(minutes=1))
    with tenant_scope(tenant_a.pk):
        context = trends.runs_charts(member, "24h")
    assert totals(chart_of(context, "runs_chart")) == {"succeeded": 1, "waiting": 1}
    latency = chart_of(context, "latency_chart")
    p95 = [v for (_, series), v in values(latency, "circle").items() if series == "p95"]
    assert p95 == [pytest.approx(29.0)]  # of 10 and 30 ms; the admin's 5 s step is not theirs


def test_step_latency_p50_and_p95_come_from_percentiles_in_sql(members, tenant_a, tenant_b, now):
    run = at(make_run(tenant_a, status="succeeded", step_seq=0), now - dt.timedelta(minutes=5))
    for seq, ms in enumerate(range(10, 101, 10), start=1):  # 10, 20, ... 100 ms
        step_took(run, seq, ms, now - dt.timedelta(minutes=4))
    theirs = at(make_run(tenant_b, status="succeeded", step_seq=0), now)
    step_took(theirs, 1, 5000, now)
    admin = factories.principal_for(members["admin"])
    with tenant_scope(tenant_a.pk):
        figure = chart_of(trends.runs_charts(admin, "24h"), "latency_chart")
    found = {series: value for (_, series), value in values(figure, "circle").items()}
    assert found == {"p50": pytest.approx(55.0), "p95": pytest.approx(95.5)}
    assert "10 successful steps" in figure.find(f"{SVG}svg/{SVG}desc").text


def test_a_busy_period_reads_the_steps_of_a_uniform_sample_of_runs_and_says_so(
    members, tenant_a, now, monkeypatch
):
    monkeypatch.setattr("agents.runtime.selectors.LATENCY_SAMPLE_RUNS", 20)
    for _ in range(80):
        run = at(make_run(tenant_a, status="succeeded", step_seq=0), now - dt.timedelta(minutes=5))
        step_took(run, 1, 40, now - dt.timedelta(minutes=4))
    admin = factories.principal_for(members["admin"])
    with tenant_scope(tenant_a.pk):
        latency = selectors.step_latency_over_time(
            admin, since=now - dt.timedelta(hours=1), bucket="hour"
        )
        context = trends.runs_charts(admin, "24h")
    assert latency.runs == 80 and latency.sampled == 0.25
    read = sum(n for *_, n in latency.rows)
    assert 5 <= read <= 45  # about a quarter of the runs' steps, chosen by a hash of the id
    assert {p50 for _, p50, _, _ in latency.rows} == {40.0}
    desc = chart_of(context, "latency_chart").find(f"{SVG}svg/{SVG}desc").text
    assert "a uniform sample of about 25% of its 80 runs" in desc
    assert context["latency_sampled"]


def test_a_period_without_runs_says_so_instead_of_drawing_zeros(members):
    admin = factories.principal_for(members["admin"])
    with tenant_scope(admin.tenant.pk):
        context = trends.runs_charts(admin, "24h")
    assert chart_of(context, "runs_chart").find("p").text == (
        "No runs in this period (the last 24 hours)."
    )
    assert chart_of(context, "latency_chart").find("p").text.startswith("No steps ran")


def test_the_charts_are_one_statement_each(members, history, django_assert_num_queries):
    admin = factories.principal_for(members["admin"])
    with tenant_scope(admin.tenant.pk), django_assert_num_queries(2):
        trends.runs_charts(admin, "7d")


# --- the endpoints: who may see them --------------------------------------------------------------

WHO = ["admin", "manager", "member", "viewer", "outsider"]


@pytest.mark.parametrize("who", WHO)
def test_every_role_gets_the_runs_pages_charts_of_what_it_may_see(client_for, history, who):
    response = client_for(who).get("/runs/charts/?period=24h", **HX)
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<section class="card charts-card" id="runs-charts"')
    if who in ("admin", "manager", "viewer"):
        assert 'data-series="succeeded"' in html and 'data-value="4"' not in html
    elif who == "outsider":  # their own tenant's four failed runs, nothing of tenant A's
        assert 'data-series="failed"' in html and 'data-value="4"' in html
        assert 'data-series="succeeded"' not in html
    else:  # the member started none of them
        assert "No runs in this period" in html


def test_the_runs_page_loads_its_charts_after_itself_and_without_htmx_goes_to_the_page(
    client_for,
):
    client = client_for("admin")
    page = client.get("/runs/?period=7d").content.decode()
    assert 'hx-get="/runs/charts/?period=7d" hx-trigger="load"' in page
    response = client.get("/runs/charts/?period=7d")
    assert response.status_code == 302 and response["Location"] == "/runs/?period=7d"
    assert client_for("anonymous").get("/runs/charts/", **HX).status_code == 302


@pytest.mark.parametrize("who", [*WHO, "anonymous"])
def test_only_admins_get_the_consoles_charts(client_for, history, who):
    response = client_for(who).get("/console/charts/?period=7d", **HX)
    expected = {"admin": 200, "outsider": 200, "anonymous": 302}.get(who, 403)
    assert response.status_code == expected
    if who == "admin":
        figure = response.content.decode()
        assert 'id="console-charts"' in figure and 'data-series="succeeded"' in figure
    if who == "outsider":  # tenant B's four failed runs only
        html = response.content.decode()
        assert 'data-value="4"' in html and 'data-series="succeeded"' not in html


def test_the_console_loads_its_charts_after_the_list(client_for):
    page = client_for("admin").get("/console/").content.decode()
    assert 'hx-get="/console/charts/?period=24h" hx-trigger="load"' in page
