"""One way to say no on the runs lists: a bad filter is said next to its field and in a
summary, is not applied (the other filters are), and the answer is a 400, for the page and
for its htmx fragment alike; the runs page and the console share one filter form."""

from __future__ import annotations

import re

import pytest

from tests.agents.console_helpers import make_run

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


def shown(page: str, *runs) -> set:
    return {r.pk for r in runs if f"-row-{r.pk}" in page}


def field_error(page: str, field: str) -> str:
    """The inline error beside the filter `field` (empty if none)."""
    found = re.search(rf'<span class="error" id="filter-{field}-error">(.*?)</span>', page)
    return found.group(1) if found else ""


# --- the runs page --------------------------------------------------------------------------------


def test_runs_list_with_an_unknown_status_shows_an_inline_error(client_for, tenant_a):
    response = client_for("manager").get("/runs/?status=bogus")
    assert response.status_code == 400
    page = text(response)
    error = field_error(page, "status")
    assert error.startswith("“bogus” is not a status. Choose one of: queued, running,")
    assert "Select a valid choice" not in page
    assert 'aria-invalid="true" aria-describedby="filter-status-error"' in page
    assert '<div class="filter-problems" id="runs-filters-problems" role="alert">' in page
    assert '<a href="#filter-status">Status</a>: “bogus” is not a status.' in page


def test_runs_list_applies_the_good_filters_and_drops_only_the_bad_one(client_for, tenant_a):
    failed = make_run(tenant_a, status="failed")
    done = make_run(tenant_a, status="succeeded")
    other_agent = make_run(tenant_a, status="failed", agent="three_steps")
    response = client_for("manager").get("/runs/?status=bogus&agent=console_shop")
    assert response.status_code == 400
    page = text(response)
    assert shown(page, failed, done, other_agent) == {failed.pk, done.pk}
    assert field_error(page, "agent") == ""  # the agent filter was fine, and is applied
    assert '<option value="console_shop" selected>' in page
    # The way out keeps the good filter.
    assert 'href="/runs/?agent=console_shop">Clear this filter</a>' in page


def test_runs_list_fragment_answers_a_bad_filter_like_the_page(client_for, tenant_a):
    run = make_run(tenant_a, status="failed")
    response = client_for("manager").get("/runs/?status=bogus", **HX)
    assert response.status_code == 400
    page = text(response)
    assert "<html" not in page and shown(page, run) == {run.pk}
    # The filter form comes back beside the table, saying what was not applied.
    assert '<form method="get" action="/runs/" id="runs-filters"' in page
    assert 'hx-swap-oob="true"' in page and field_error(page, "status")


def test_runs_list_with_good_filters_says_nothing(client_for, tenant_a):
    response = client_for("manager").get("/runs/?status=failed&agent=console_shop")
    assert response.status_code == 200
    page = text(response)
    assert "filter-problems" not in page and 'aria-invalid="true"' not in page
    assert '<option value="failed" selected>' in page


def test_runs_list_with_a_broken_position_starts_from_the_newest(client_for, tenant_a):
    run = make_run(tenant_a, status="failed")
    response = client_for("manager").get("/runs/?before=garbage")
    assert response.status_code == 400
    page = text(response)
    assert shown(page, run) == {run.pk}
    # No control shows the position: the summary names it without a link.
    assert "<li>Position: “garbage” is not a position in the list" in page


def test_runs_list_with_an_unknown_agent_names_the_agents_there_are(client_for):
    page = text(client_for("member").get("/runs/?agent=nope"))
    assert field_error(page, "agent").startswith("“nope” is not an agent. Choose one of: ")


def test_a_very_long_bad_value_is_shortened_in_the_message(client_for):
    response = client_for("manager").get("/runs/?status=" + "x" * 500)
    assert response.status_code == 400
    error = field_error(text(response), "status")
    assert error.startswith("“" + "x" * 39 + "…” is not a status") and "x" * 41 not in error


def test_runs_page_with_an_unknown_chart_period_says_so_and_draws_the_default(client_for):
    response = client_for("manager").get("/runs/?period=5y")
    assert response.status_code == 400
    page = text(response)
    assert "<li>Period of the charts: “5y” is not a period. Choose one of: 24h, 7d.</li>" in page
    assert "/runs/charts/?period=24h" in page


def test_the_charts_fragment_with_an_unknown_period_says_so_and_draws_the_default(client_for):
    response = client_for("manager").get("/runs/charts/?period=5y", **HX)
    assert response.status_code == 400
    page = text(response)
    assert "“5y” is not a period. Choose one of: 24h, 7d." in page and 'role="alert"' in page
    assert 'id="runs-over-time-24h"' in page


# --- the console ----------------------------------------------------------------------------------


def test_console_with_an_unknown_age_shows_an_inline_error_not_djangos(client_for, tenant_a):
    run = make_run(tenant_a, status="failed")
    for headers in ({}, HX):
        response = client_for("admin").get("/console/?age=bogus", **headers)
        assert response.status_code == 400
        page = text(response)
        assert "Select a valid choice" not in page
        assert field_error(page, "age") == (
            "“bogus” is not an age. Choose one of: lt1h, gt1h, gt1d, gt7d."
        )
        assert '<div class="filter-problems" id="console-filters-problems" role="alert">' in page
        assert shown(page, run) == {run.pk}  # the bad filter is not applied


def test_console_applies_the_good_filters_beside_a_bad_one(client_for, tenant_a):
    stuck = make_run(tenant_a, status="failed", error={"code": "retries_exhausted"})
    fine = make_run(tenant_a, status="succeeded")
    response = client_for("admin").get("/console/?stuck=retries_exhausted&age=bogus", **HX)
    assert response.status_code == 400
    assert shown(text(response), stuck, fine) == {stuck.pk}


def test_console_with_an_end_user_name_too_long_keeps_what_was_typed(client_for):
    response = client_for("admin").get("/console/?user=" + "u" * 151)
    assert response.status_code == 400
    page = text(response)
    assert field_error(page, "user") == "At most 150 characters (this one has 151)."
    assert f'value="{"u" * 151}"' in page  # to be corrected, not retyped


def test_the_recovered_history_says_a_bad_window_inline_in_the_same_style(client_for):
    for url, headers in (("/console/?since=week", {}), ("/console/recovered/?since=week", HX)):
        response = client_for("admin").get(url, **headers)
        assert response.status_code == 400
        page = text(response)
        assert field_error(page, "since") == (
            "“week” is not a time window. Choose one of: hour, day."
        )
        assert 'id="recovered-filters-problems" role="alert"' in page


def test_the_runs_page_and_the_console_render_one_filter_form(client_for):
    runs = text(client_for("admin").get("/runs/"))
    console = text(client_for("admin").get("/console/"))
    for page, form_id in ((runs, "runs-filters"), (console, "console-filters")):
        form = re.search(rf'<form method="get"[^>]* id="{form_id}" class="filters[^"]*"', page)
        assert form is not None
        assert '<p class="filter-field"> <label for="filter-status">Status</label>' in page
        assert '<p class="filter-submit"><button type="submit">Filter</button></p>' in page
