"""{% kept %} (core/fragments.py): a fragment rendered once per key and place, reused after."""

from __future__ import annotations

import pytest
from django.template import Context, Template, TemplateSyntaxError

from core import fragments


@pytest.fixture(autouse=True)
def _nothing_kept():
    fragments._kept.clear()
    yield
    fragments._kept.clear()


def render(source: str, **context) -> str:
    return Template(source).render(Context(context))


KEPT = "{% kept key %}<b>{{ n }}</b>{% endkept %}"


def test_a_fragment_is_rendered_once_per_key_and_reused_while_the_key_is_the_same():
    template = Template(KEPT)
    assert template.render(Context({"key": ("run", 1), "n": 1})) == "<b>1</b>"
    assert template.render(Context({"key": ("run", 1), "n": 2})) == "<b>1</b>"
    assert template.render(Context({"key": ("run", 2), "n": 2})) == "<b>2</b>"


@pytest.mark.parametrize("key", [None, "", ()])
def test_a_false_key_renders_afresh_and_keeps_nothing(key):
    template = Template(KEPT)
    assert template.render(Context({"key": key, "n": 1})) == "<b>1</b>"
    assert template.render(Context({"key": key, "n": 2})) == "<b>2</b>"
    assert not fragments._kept


def test_a_missing_key_keeps_nothing():
    assert render(KEPT, n=1) == "<b>1</b>"
    assert render(KEPT, n=2) == "<b>2</b>"
    assert not fragments._kept


def test_the_same_key_in_two_places_keeps_two_fragments():
    source = "{% kept key %}a{{ n }}{% endkept %}|{% kept key %}b{{ n }}{% endkept %}"
    assert render(source, key="k", n=1) == "a1|b1"


def test_what_is_kept_stays_escaped_as_rendered():
    template = Template(KEPT)
    assert template.render(Context({"key": "k", "n": "<i>"})) == "<b>&lt;i&gt;</b>"
    assert template.render(Context({"key": "k", "n": "other"})) == "<b>&lt;i&gt;</b>"


def test_at_most_size_fragments_are_kept(monkeypatch):
    monkeypatch.setattr(fragments, "SIZE", 3)
    template = Template(KEPT)
    for n in range(10):
        template.render(Context({"key": n, "n": n}))
        assert len(fragments._kept) <= 3


def test_the_tag_takes_exactly_one_key():
    with pytest.raises(TemplateSyntaxError):
        Template("{% kept %}x{% endkept %}")
    with pytest.raises(TemplateSyntaxError):
        Template("{% kept a b %}x{% endkept %}")
