"""/api/schema/ is public and its schema is the code's: each process builds it once per API
version and language, not at every request, and a flood of `?lang=` values grows nothing."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings

from config import schema

pytestmark = [pytest.mark.django_db]


@pytest.fixture
def builds(monkeypatch):
    """How many times a schema was built, from now on."""
    schema.SchemaView._built.clear()
    counted: list[int] = []
    base = schema.SchemaView.generator_class

    class Counting(base):
        def get_schema(self, *args, **kwargs):
            counted.append(1)
            return super().get_schema(*args, **kwargs)

    monkeypatch.setattr(schema.SchemaView, "generator_class", Counting)
    yield counted
    schema.SchemaView._built.clear()


def test_the_schema_is_built_once_and_served_to_every_caller_in_each_format(builds):
    client = Client()
    yaml = [client.get("/api/schema/") for _ in range(3)]
    as_json = client.get("/api/schema/?format=json")

    assert {r.status_code for r in [*yaml, as_json]} == {200}
    assert len({r.content for r in yaml}) == 1
    assert "/api/v1/runs" in as_json.json()["paths"]
    assert len(builds) == 1


def test_made_up_languages_and_versions_are_answered_from_the_one_schema_built(builds):
    client = Client()
    answers = [client.get(f"/api/schema/?lang=x{i}") for i in range(3 * schema.KEPT)]
    answers += [client.get(f"/api/schema/?version=v{i}") for i in range(3)]

    assert {r.status_code for r in answers} == {200}
    assert len({r.content for r in answers}) == 1
    assert len(builds) == 1 and len(schema.SchemaView._built) == 1


def test_a_changed_setting_forgets_the_built_schema(builds):
    Client().get("/api/schema/")
    with override_settings(SPECTACULAR_SETTINGS_CHANGED_BY_TEST=True):
        pass
    Client().get("/api/schema/")

    assert len(builds) == 2
