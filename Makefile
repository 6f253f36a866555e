# Everything sets itself up: a .venv in the repo from pinned requirements + constraints,
# installed by uv (pinned here): from its cache alone when that holds every wheel (a few
# seconds), else from the index; pip took 85 s for the same set on a warm cache.
# Byte code is compiled at install, as pip does and uv does not by default: an environment
# that sets PYTHONDONTWRITEBYTECODE (these machines do) would otherwise compile every
# module afresh in every process (0.2-0.8 s of each CLI command; docs/adr/0013).
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
UV_VERSION := 0.13.9
UV     := $(BIN)/uv pip install -q --python $(BIN)/python
export SLEEPER_HOME ?= .sleeper

.PHONY: install browser redis demo airflow cluster lint check test test-unit test-profile bench clean

$(STAMP): requirements.txt constraints.txt pyproject.toml
	test -x $(BIN)/python || python3 -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check uv==$(UV_VERSION)
	$(UV) --offline -r requirements.txt -c constraints.txt 2>/dev/null || $(UV) -r requirements.txt -c constraints.txt
	$(UV) --no-deps -e .
	$(BIN)/python -m compileall -q -j 0 $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))') \
		plugins statestore dags spark_apps >/dev/null || echo "byte code: some files did not compile (they load from source)"
	touch $(STAMP)

install: $(STAMP)

# Headless Chromium for the status page's browser test: Debian's package, installed
# when missing and we are root (the test skips, saying why, when there is none).
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 || \
	   (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1)) \
	  || echo "chromium not installed: the status page screenshot test will skip"; }

# Redis, the Celery broker of sleeper cluster: Debian's redis-server, installed when missing
# and we are root (sleeper cluster says how to install it when there is none).
redis:
	@command -v redis-server >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get install -y -q --no-install-recommends redis-server >/dev/null 2>&1 || \
	   (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends redis-server >/dev/null 2>&1)) \
	  || echo "redis-server not installed: sleeper cluster and its test need it"; }

demo: install
	$(BIN)/sleeper demo

# Airflow standalone on 127.0.0.1 (PORT=8080 by default) with the Sleeper DAGs and plugin; Ctrl-C stops it.
PORT ?= 8080
airflow: install
	$(BIN)/sleeper airflow --port $(PORT)

# The scaled-out shape (sleeper cluster): Airflow with the CeleryExecutor (2 workers, Redis),
# S3 and DynamoDB on moto (STATE_STORE=postgres: PostgreSQL), a Spark master, 2 workers and
# the Sleeper Spark service; Ctrl-C stops them all.
STATE_STORE ?= dynamodb
cluster: install redis
	$(BIN)/sleeper cluster --state-store $(STATE_STORE) --port $(PORT)

# ruff, mypy (statestore and sleeper_ops) and the import contracts (docs/LAYERING.md).
lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports --config .importlinter --no-cache

# The tests in parallel (pytest-xdist, TEST_WORKERS processes: they mostly wait on
# subprocesses and servers, so more workers than cores), each module whole on one worker
# (--dist loadfile: a module-scoped Airflow server or Spark session starts once; xdist's
# loadgroup does not group under pytest 9). The lint runs meanwhile (mypy is a minute of
# one core), its output printed after the tests'; either failing fails the target.
# Prints the slowest tests and the total time.
TEST_WORKERS ?= 4
PYTEST_ARGS ?=
# Byte code is written (a test run starts hundreds of Python processes; an environment
# that sets PYTHONDONTWRITEBYTECODE would have each compile our modules afresh).
test: export PYTHONDONTWRITEBYTECODE :=
test: install browser redis
	@start=$$(date +%s); lintlog=$$(mktemp); \
	( $(MAKE) --no-print-directory lint >$$lintlog 2>&1; echo $$? >>$$lintlog.rc ) & \
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --durations=15 $(PYTEST_ARGS); \
	rc=$$?; wait; lrc=$$(cat $$lintlog.rc); \
	if [ "$$lrc" != 0 ]; then echo "lint failed (exit $$lrc):"; cat $$lintlog; [ $$rc != 0 ] || rc=$$lrc; fi; \
	rm -f $$lintlog $$lintlog.rc; \
	echo "make test: $$(( $$(date +%s) - start )) s in all (lint and tests), exit $$rc"; exit $$rc

test-unit: install
	$(BIN)/python -m pytest -q tests/unit

# The fast loop (under 2 minutes): ruff, the import contracts, then mypy (incremental,
# its cache in .mypy_cache) beside the unit tests on two workers; either failing fails it.
check: install
	@start=$$(date +%s); $(BIN)/ruff check . || exit 1; \
	contracts=$$($(BIN)/lint-imports --config .importlinter --no-cache 2>&1) || { echo "$$contracts"; exit 1; }; \
	mypylog=$$(mktemp); ( $(BIN)/mypy >$$mypylog 2>&1; echo $$? >$$mypylog.rc ) & \
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 2 tests/unit; rc=$$?; wait; \
	mrc=$$(cat $$mypylog.rc); [ "$$mrc" = 0 ] || { cat $$mypylog; [ $$rc != 0 ] || rc=$$mrc; }; \
	rm -f $$mypylog $$mypylog.rc; echo "make check: $$(( $$(date +%s) - start )) s, exit $$rc"; exit $$rc

# make test with each test's CPU seconds (its own and its child processes') written to
# test-cpu.jsonl and summed per module at the end, then every process of the run sampled
# (servers and daemons too) summed per program: where the suite's time goes.
test-profile: export SLEEPER_TEST_CPU := $(CURDIR)/test-cpu.jsonl
test-profile:
	rm -f test-cpu.jsonl test-cpu.jsonl.processes
	-$(MAKE) --no-print-directory test
	$(BIN)/python -m tests.cpu_profile test-cpu.jsonl
	$(BIN)/python -m tests.process_profile test-cpu.jsonl.processes

bench: install
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/query.py
	$(BIN)/python bench/statestore_commits.py
	$(BIN)/python bench/compaction.py --rows 2000000

clean:
	rm -rf $(VENV) .sleeper
