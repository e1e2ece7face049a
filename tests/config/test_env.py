"""Settings from the environment fail loudly on bad values."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from core.env import env_bool, env_hosts, env_int, env_list, env_url
from core.redis_client import sentinel_broker_url


@pytest.mark.parametrize("raw,expected", [("1", True), ("yes", True), ("off", False), ("", False)])
def test_booleans_accept_the_usual_spellings(monkeypatch, raw, expected):
    monkeypatch.setenv("X_FLAG", raw)
    assert env_bool("X_FLAG", not expected) is expected


def test_an_unset_value_takes_the_default(monkeypatch):
    monkeypatch.delenv("X_FLAG", raising=False)
    assert env_bool("X_FLAG", True) is True
    assert env_int("X_FLAG", 7) == 7
    assert env_list("X_FLAG", ["a"]) == ["a"]
    assert env_url("X_FLAG", schemes=("redis",)) is None


@pytest.mark.parametrize(
    "reader,raw",
    [
        (lambda: env_bool("X_VAL", False), "maybe"),
        (lambda: env_int("X_VAL", 1), "ten"),
        (lambda: env_int("X_VAL", 1, minimum=1), "0"),
        (lambda: env_url("X_VAL", schemes=("postgres",)), "mysql://db/x"),
        (lambda: env_url("X_VAL", schemes=("redis",)), "localhost:6379"),
    ],
)
def test_a_bad_value_raises_improperly_configured_naming_the_variable(monkeypatch, reader, raw):
    monkeypatch.setenv("X_VAL", raw)
    with pytest.raises(ImproperlyConfigured, match="X_VAL"):
        reader()


def test_lists_are_comma_separated_and_trimmed(monkeypatch):
    monkeypatch.setenv("X_VAL", " a.example , b.example,, ")
    assert env_list("X_VAL", []) == ["a.example", "b.example"]


def test_sentinels_are_host_port_pairs_with_the_default_port_when_none_is_given(monkeypatch):
    monkeypatch.setenv("X_HOSTS", "s1:26380, s2 ,10.0.0.3:26379")
    assert env_hosts("X_HOSTS", default_port=26379) == [
        ("s1", 26380),
        ("s2", 26379),
        ("10.0.0.3", 26379),
    ]
    monkeypatch.delenv("X_HOSTS")
    assert env_hosts("X_HOSTS", default_port=26379) == []


@pytest.mark.parametrize("raw", ["s1:port", "s1:0", "s1:70000", ":26379"])
def test_a_sentinel_that_is_not_host_port_stops_the_settings(monkeypatch, raw):
    monkeypatch.setenv("X_HOSTS", raw)
    with pytest.raises(ImproperlyConfigured):
        env_hosts("X_HOSTS", default_port=26379)


def test_the_broker_asks_every_sentinel_with_redis_urls_password_and_database():
    url = sentinel_broker_url("redis://:p%40ss@ignored:6379/4", [("s1", 26379), ("s2", 26380)])
    assert url == "sentinel://:p%40ss@s1:26379/4;sentinel://:p%40ss@s2:26380/4"
    assert sentinel_broker_url("redis://host", [("s1", 1)]) == "sentinel://s1:1/0"
