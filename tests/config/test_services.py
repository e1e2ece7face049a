"""Embedded servers when no URL is set; the given servers, and nothing started, when set."""

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


@pytest.mark.slow
def test_without_urls_embedded_servers_start_under_var_and_keep_data_across_restarts(
    tmp_path, monkeypatch
):
    env = {"AGENTSTATE_VAR_DIR": str(tmp_path), "DATABASE_URL": "", "REDIS_URL": ""}
    monkeypatch.setenv("AGENTSTATE_VAR_DIR", str(tmp_path))
    try:
        seen = run_probe(env)
        assert "PostgreSQL 18" in seen["version"]
        assert (tmp_path / "postgres" / "PG_VERSION").exists()
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
