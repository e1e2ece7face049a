# AgentState: `make run` brings up the console, `make test` runs every test (`make test-fast`
# the quick ones).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
UV := uv==0.13.8
UV_FIND_LINKS := $(foreach d,$(PIP_FIND_LINKS),--find-links $(d))
HOST ?= 127.0.0.1
WEB_PORT ?= 8000
export HOST WEB_PORT

.PHONY: run test test-fast test-collect install lint fmt bench services-up services-down clean-var

run: $(STAMP)
	@$(COMPILE) >/dev/null
	@DEBUG=$${DEBUG:-1} AGENTSTATE_DEMO=$${AGENTSTATE_DEMO:-1} \
	  $(PY) -m config.embedded exec -- $(PY) -m config.run

# `make test` runs on TEST_WORKERS pytest-xdist workers, `make test-fast` on FAST_TEST_WORKERS,
# each on PostgreSQL and Redis of its own (tests/parallel.py); PYTEST_ARGS="-n0" runs serially.
# `test-fast` leaves out the browser (`e2e`) and `slow` tests (they start processes or servers,
# load the embedding model or run the migrations back and forth), and keeps each worker's test
# database for the next run (new migrations are applied; PYTEST_ARGS=--create-db makes it
# afresh): the loop to run while editing. Each worker costs its collection of every test (~12 s
# of CPU), its database's migrations (~25 s) and servers of its own. test-fast took 4:31 on 3,
# 5:03 on 4. make test's parallel pass: 732 s on 4 against 803 s on 3, the same hour, since the
# tests' Celery workers and servers are forked pre-imported (tests/zygote.py), which left the
# cores idle while tests waited on leases and timers (before it, 4 workers lost: 827-847 s
# against 689 s on 3).
TEST_WORKERS ?= 4
FAST_TEST_WORKERS ?= 3
# pytest rewrites the asserts of every test module it collects, 6-7 s of each pytest process's
# CPU. Where PYTHONDONTWRITEBYTECODE is set, as on this machine, it never kept the result and
# every worker did it again at every run; the test runs let it keep them (__pycache__, beside
# Python's own bytecode), and `test-collect` writes them ahead (.ci/run, during lint).
TEST_ENV = PYTHONDONTWRITEBYTECODE=
TEST_RUN = $(TEST_ENV) AGENTSTATE_VAR_DIR=$${AGENTSTATE_VAR_DIR:-$(CURDIR)/var/test} \
	  $(PY) -m config.embedded exec -- $(PY) -m pytest --dist loadgroup
TEST_RUN_SOLO = $(TEST_ENV) AGENTSTATE_VAR_DIR=$${AGENTSTATE_VAR_DIR:-$(CURDIR)/var/test} \
	  $(PY) -m config.embedded exec -- $(PY) -m pytest -n0
# The project's own bytecode, written once before the tests (and `make run`): where
# PYTHONDONTWRITEBYTECODE is set, as on this machine, no process writes it, and each of the
# ~150 processes the suite starts (workers, beats, servers) compiled what it imported. Only
# changed files are compiled again; a stale file is ignored by Python, never run.
COMPILE = $(PY) -m compileall -q -j 0 agents memory approvals tenants core config tests sdk/python

# The browser tests (`e2e`) run in the parallel pass as one group (`--dist loadgroup`,
# tests/parallel.py): one worker takes them one after another while the others take the rest;
# the tests that load the embedding model are another group, so one worker loads it. The
# `solo` tests (they time kills of workers against steps) run after it, one at a time, on a
# machine no other test loads.
# pytest's exit 5 (none selected) is fine there.
test: $(STAMP)
	@$(COMPILE) >/dev/null
	$(TEST_RUN) -n $(TEST_WORKERS) -m "not solo" $(PYTEST_ARGS)
	$(TEST_RUN_SOLO) -m "solo" $(SOLO_ARGS) || [ $$? -eq 5 ]

test-fast: $(STAMP)
	@$(COMPILE) >/dev/null
	$(TEST_RUN) -n $(FAST_TEST_WORKERS) -m "not e2e and not slow and not solo" --reuse-db $(PYTEST_ARGS)

# Collects every test without running one (no servers needed): the rewritten test modules are
# kept for the test runs after it.
test-collect: $(STAMP)
	@$(COMPILE) >/dev/null
	$(TEST_ENV) DATABASE_URL=postgres://collect@127.0.0.1:1/collect \
	  REDIS_URL=redis://127.0.0.1:1/0 SECRET_KEY=collect-only \
	  $(PY) -m pytest --collect-only -q -n0 -p no:cacheprovider >/dev/null

install: $(STAMP)

$(STAMP): pyproject.toml sdk/python/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# uv (from PyPI) resolves, downloads and unpacks in parallel: a fresh install takes about
	@# 45 s here against pip's 70. It compiles every module's bytecode too: where
	@# PYTHONDONTWRITEBYTECODE is set, as on this machine, no process writes it, and the suite,
	@# which starts hundreds, took 2.5 minutes longer without. uv reads no pip.conf: pip's
	@# find-links (PIP_FIND_LINKS, e.g. a local CPU-only torch wheel) are passed on. If uv
	@# cannot run here, pip does the same install.
	$(PY) -m pip install --quiet $(UV)
	$(VENV)/bin/uv pip install --python $(PY) --quiet --compile-bytecode $(UV_FIND_LINKS) \
	  '.[test,embeddings]' -e ./sdk/python \
	  || $(PY) -m pip install --quiet '.[test,embeddings]' -e ./sdk/python
	@# The client package (sdk/python) is editable: tests/sdk drive it against the live server.
	touch $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	@# django-stubs imports the settings, which connect to nothing: placeholders will do.
	DATABASE_URL=postgres://lint@127.0.0.1:1/lint REDIS_URL=redis://127.0.0.1:1/0 \
	  SECRET_KEY=lint-only $(VENV)/bin/mypy

fmt: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# Benchmarks (run by hand, never in tests): every bench/*.py not starting with "_" (those are
# helpers). See bench/README.md. A bench that misses its target exits 1; the others still run
# and `make bench` fails at the end.
bench: $(STAMP)
	$(VENV)/bin/uv pip install --python $(PY) --quiet --compile-bytecode $(UV_FIND_LINKS) '.[bench]'
	@status=0; for script in bench/[!_]*.py; do \
	  echo "== $$script"; $(PY) $$script || status=1; \
	done; exit $$status

services-up: $(STAMP)
	$(PY) -m config.embedded up

services-down: $(STAMP)
	$(PY) -m config.embedded down
