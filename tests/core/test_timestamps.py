"""`|timestamp` renders exactly what `<time datetime="{{ x|date:'c' }}">{{ x|date:F }}</time>`
rendered, in the current time zone, for every format the pages use."""

from __future__ import annotations

import datetime as dt

import pytest
from django.template import Context, Template
from django.utils import timezone

MOMENTS = [
    dt.datetime(2026, 12, 1, 9, 5, 3, 123456, tzinfo=dt.UTC),
    dt.datetime(2026, 1, 31, 23, 59, 59, tzinfo=dt.UTC),
]


@pytest.mark.parametrize("fmt", ["Y-m-d H:i:s", "Y-m-d H:i", "H:i:s", "D j M"])
@pytest.mark.parametrize("moment", MOMENTS)
@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris", "America/Los_Angeles"])
def test_timestamp_renders_what_the_date_filter_pair_rendered(fmt, moment, zone):
    old = Template(f"""<time datetime="{{{{ x|date:'c' }}}}">{{{{ x|date:"{fmt}" }}}}</time>""")
    new = Template(f'{{{{ x|timestamp:"{fmt}" }}}}')
    with timezone.override(zone):
        assert new.render(Context({"x": moment})) == old.render(Context({"x": moment}))


def test_timestamp_of_nothing_is_empty():
    assert Template("{{ x|timestamp }}").render(Context({"x": None})) == ""
