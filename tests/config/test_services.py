"""The given servers when URLs are set; importing settings never starts one; production mode
refuses to start without its service settings; the embedded launcher hands URLs over."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
import redis
from django.conf import settings

from config import embedded

BASE_DIR = Path(__file__).resolve().parents[2]
PROBE = (
    "import django, json; django.setup();"
    "from django.conf import settings; from django.db import connection;"
    "import redis;"
    "c = connection.cursor(); c.execute('select current_user, version()');"
    "user, version = c.fetchone();"
    "redis.Redis.from_url(settings.REDIS_URL).ping();"
    "print(json.dumps({'user': user, 'version': version, 'db': settings.DATABASE_URL,"
    " 'redis': settings.REDIS_URL}))"
)


def run_probe(env: dict[str, str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=BASE_DIR,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_with_urls_set_the_app_uses_those_servers_and_starts_nothing(tmp_path):
    env = {
        "DATABASE_URL": settings.DATABASE_URL,
        "REDIS_URL": settings.REDIS_URL,
        "AGENTSTATE_VAR_DIR": str(tmp_path),
        "SECRET_KEY": "x" * 50,
    }
    seen = run_probe(env)
    assert seen["db"] == settings.DATABASE_URL and seen["redis"] == settings.REDIS_URL
    assert seen["user"] == "agentstate"
    assert not (tmp_path / "postgres").exists()
    assert not (tmp_path / "redis" / "redis.pid").exists()


def _import_settings(env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in _SERVICE_VARS}
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=BASE_DIR,
        env={**base, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


_SERVICE_VARS = ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DEBUG", "AGENTSTATE_DEMO")


@pytest.mark.parametrize("missing", ["DATABASE_URL", "REDIS_URL", "SECRET_KEY"])
def test_in_production_mode_settings_without_a_service_setting_refuse_to_import(tmp_path, missing):
    env = {
        "DATABASE_URL": settings.DATABASE_URL,
        "REDIS_URL": settings.REDIS_URL,
        "SECRET_KEY": "x" * 50,
        "AGENTSTATE_VAR_DIR": str(tmp_path),
    }
    del env[missing]
    out = _import_settings(env)
    assert out.returncode != 0
    assert f"{missing} must be set" in out.stderr
    assert not (tmp_path / "postgres").exists() and not (tmp_path / "secret_key").exists()


@pytest.mark.parametrize("raw", ["mysql://h/db", "not a url", "postgres://"])
def test_a_replica_url_that_is_not_postgresql_stops_the_settings(tmp_path, raw):
    env = {
        "DATABASE_URL": settings.DATABASE_URL,
        "REDIS_URL": settings.REDIS_URL,
        "SECRET_KEY": "x" * 50,
        "AGENTSTATE_VAR_DIR": str(tmp_path),
        "DATABASE_REPLICA_URL": raw,
    }
    out = _import_settings(env)
    assert out.returncode != 0
    assert "DATABASE_REPLICA_URL must be a URL starting with postgres://" in out.stderr


def test_with_debug_and_nothing_running_importing_settings_starts_no_server(tmp_path):
    out = _import_settings({"DEBUG": "1", "AGENTSTATE_VAR_DIR": str(tmp_path)})
    assert out.returncode != 0
    assert "DATABASE_URL must be set" in out.stderr
    assert not (tmp_path / "postgres").exists()
    assert not (tmp_path / "redis" / "redis.pid").exists()


@pytest.mark.slow
def test_embedded_servers_start_under_var_hand_their_urls_over_and_keep_data(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTSTATE_VAR_DIR", str(tmp_path))
    try:
        env = embedded.service_env({})
        seen = run_probe(env)
        assert "PostgreSQL 18" in seen["version"]
        assert (tmp_path / "postgres" / "PG_VERSION").exists()
        # With DEBUG on, settings find the running embedded servers without being told.
        found = run_probe({"DEBUG": "1", "DATABASE_URL": "", "REDIS_URL": "", "SECRET_KEY": ""})
        assert found["db"] == seen["db"] and found["redis"] == seen["redis"]
        with psycopg.connect(seen["db"], autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (v text)")
            conn.execute("INSERT INTO kept VALUES ('still here')")
            ext = conn.execute("SELECT extname FROM pg_extension WHERE extname='vector'")
            assert ext.fetchone() == ("vector",)
        redis.Redis.from_url(seen["redis"]).set("kept", "yes")

        assert embedded.stop_postgres() and embedded.stop_redis()
        assert embedded.ensure_postgres() == seen["db"]  # same port, same password
        assert embedded.ensure_redis() == seen["redis"]

        with psycopg.connect(seen["db"]) as conn:
            assert conn.execute("SELECT v FROM kept").fetchone() == ("still here",)
        assert redis.Redis.from_url(seen["redis"]).get("kept") == b"yes"
    finally:
        embedded.stop_redis()
        embedded.stop_postgres()
