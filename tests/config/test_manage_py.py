"""`manage.py` in a checkout: with the embedded servers set up (`make run`) a command needs no
URL set; without them, or with a bad setting, it says in one line what to set."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from config import embedded
from tenants.services import parse_api_key

# Every test starts `manage.py` processes.
pytestmark = pytest.mark.slow

BASE_DIR = Path(__file__).resolve().parents[2]
SERVICE_VARS = ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DEBUG", "AGENTSTATE_DEMO")


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`python manage.py ARGS` as typed in a shell of this checkout: none of the settings the
    test run was handed (config.embedded exec), only `env`."""
    environ = {k: v for k, v in os.environ.items() if k not in SERVICE_VARS}
    environ.pop("DJANGO_SETTINGS_MODULE", None)
    environ.update(env)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=BASE_DIR,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def embedded_checkout() -> dict[str, str]:
    """The env of a shell in a checkout whose embedded servers run (these tests' own)."""
    if not embedded.is_set_up() or os.environ.get("DATABASE_URL") != (
        embedded.running_postgres_url()
    ):
        pytest.skip("the tests run against servers given by URL, not the embedded ones")
    return {"AGENTSTATE_VAR_DIR": str(embedded.var_dir())}


def test_a_command_runs_on_the_embedded_servers_with_no_url_set(embedded_checkout):
    started = time.monotonic()
    done = manage("check", **embedded_checkout)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert "no issues" in done.stdout
    print(f"manage.py check on the embedded servers: {took:.1f} s")
    shown = manage(
        "shell",
        "--verbosity=0",
        "-c",
        "from django.conf import settings as s; d = s.DATABASES['default'];"
        " print(d['HOST'], d['PORT'], d['NAME'], s.REDIS_URL)",
        **embedded_checkout,
    )
    assert shown.returncode == 0, shown.stderr
    pg = re.search(r"@([\d.]+):(\d+)/(\w+)$", embedded.running_postgres_url())
    assert shown.stdout.split() == [*pg.groups(), embedded.running_redis_url()]


def test_the_first_tenant_and_its_key_are_made_with_manage_py_alone(embedded_checkout):
    migrated = manage("migrate", "--no-input", **embedded_checkout)  # the checkout's own db
    assert migrated.returncode == 0, migrated.stderr
    slug = f"try-{uuid.uuid4().hex[:8]}"
    admin = ["--tenant", slug, "--username", f"ops-{slug}", "--email", f"ops@{slug}.example"]
    made = manage("tenant_admin_create", *admin, **embedded_checkout)
    assert made.returncode == 0, made.stderr
    started = time.monotonic()
    key = manage(
        "api_key_create", "--tenant", slug, "--name", "deploy", "--scope", "write",
        **embedded_checkout,
    )  # fmt: skip
    took = time.monotonic() - started
    assert key.returncode == 0, key.stderr
    print(f"manage.py api_key_create on the embedded servers: {took:.1f} s")
    raw = key.stdout.strip()
    assert key.stdout == raw + "\n" and parse_api_key(raw) is not None
    assert "Created API key 'deploy'" in key.stderr and '{"level"' not in key.stderr  # text
    again = manage("tenant_admin_create", *admin, **embedded_checkout)
    assert again.returncode == 0 and "nothing" in (again.stdout + again.stderr).lower()


def one_line_refusal(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("manage.py: "), done.stderr
    return lines[0]


def test_outside_such_a_checkout_it_says_in_one_line_what_to_set(tmp_path):
    said = one_line_refusal(manage("check", AGENTSTATE_VAR_DIR=str(tmp_path / "nothing")))
    assert "must be set" in said and "DATABASE_URL" in said and "make services-up" in said
    assert not (tmp_path / "nothing").exists()  # nothing made


PRODUCTION = {
    "DEBUG": "0",
    "DATABASE_URL": "postgres://app:secret@db.internal:5432/app",
    "REDIS_URL": "redis://cache.internal:6379/0",
    "SECRET_KEY": "a-long-random-production-key",
}


@pytest.mark.parametrize("left_out", ["DATABASE_URL", "REDIS_URL", "SECRET_KEY"])
def test_a_production_setting_left_out_is_refused_in_one_line(tmp_path, left_out):
    env = {k: v for k, v in PRODUCTION.items() if k != left_out}
    said = one_line_refusal(manage("check", AGENTSTATE_VAR_DIR=str(tmp_path), **env))
    assert f"{left_out} must be set (DEBUG and AGENTSTATE_DEMO are off)" in said


def test_a_malformed_url_is_named_in_one_line(embedded_checkout):
    env = {**PRODUCTION, "DATABASE_URL": "mysql://x@y/z"}
    said = one_line_refusal(manage("check", **embedded_checkout, **env))
    assert "DATABASE_URL" in said
