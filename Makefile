# Two entry points for a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
SDK := sdk/python
# The server needs kairos-sdk from $(SDK), never from an index: both are installed in one pip call.
RUNTIME := $(VENV)/.installed-runtime
DEV := $(VENV)/.installed-dev

.PHONY: run test lint format-check format typecheck install proto bench bench-probes loadtest clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(RUNTIME): pyproject.toml $(SDK)/pyproject.toml | $(PY)
	$(BIN)/pip install --quiet -e $(SDK) -e .
	touch $@

$(DEV): pyproject.toml $(SDK)/pyproject.toml | $(PY)
	$(BIN)/pip install --quiet -e '$(SDK)[test]' -e '.[dev]'
	touch $@

install: $(DEV)

## Start everything on the embedded PostgreSQL and submit a demo job (no development extras).
run: $(RUNTIME)
	$(BIN)/kairos up --demo

## ruff over the server, the SDK, tests and benchmarks (generated modules excluded, see pyproject.toml),
## then the format check (FORMAT_CHECK=0 leaves it out).
FORMAT_CHECK ?= 1
lint: $(DEV)
	$(BIN)/ruff check .
	@if [ "$(FORMAT_CHECK)" = 1 ]; then $(MAKE) --no-print-directory format-check; fi

## Is the tree as `ruff format` writes it? (`make format` rewrites it.)
format-check: $(DEV)
	$(BIN)/ruff format --check .

format: $(DEV)
	$(BIN)/ruff format .

## mypy, strict over app/, the SDK and tests/support ([tool.mypy] in pyproject.toml).
typecheck: $(DEV)
	$(BIN)/mypy

## Lint, type checks, the SDK's own tests, then the whole server suite (unit, integration, API, gRPC, chaos, packaging),
## in PYTEST_WORKERS pytest-xdist processes (a test file each at a time; PYTEST_WORKERS=0 runs it in this one).
PYTEST_WORKERS ?= 2
test: $(DEV) lint typecheck
	cd $(SDK) && $(CURDIR)/$(PY) -m pytest -q -p no:cacheprovider
	$(PY) -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

## Regenerate the SDK's gRPC modules from app/rpc/worker.proto.
proto: $(DEV)
	$(PY) -m scripts.codegen

## The end-to-end herd benchmark (REST submit -> scheduler -> executor -> SDK workers, each its own
## process), never part of the suite; BENCH_ARGS="--scenarios herd10k,light" picks scenarios.
## Component probes (seeded rows, skipped tiers): bench-probes.
bench: $(DEV)
	$(PY) loadtest/herd.py $(BENCH_ARGS)

bench-probes: $(DEV)
	$(PY) loadtest/dispatch_bench.py
	$(PY) loadtest/lease_bench.py
	$(PY) loadtest/db_call_probe.py
	$(PY) loadtest/lease_client_probe.py
	$(PY) loadtest/pg_cost_probe.py
	$(PY) loadtest/warmup_probe.py
	$(PY) loadtest/heap_memory.py

## Locust against a throwaway `kairos up --demo`, headless, bounded (LOCUST_ARGS="-u 50 -t 60s --shape herd").
loadtest: $(DEV)
	$(PY) loadtest/run_locust.py $(LOCUST_ARGS)

## Every failure drill in every mode (kairos drill ...; runbooks/region-failover.md), then the Patroni drill's test.
## Each drill stops itself after DRILL_TIMEOUT seconds (and is sent SIGTERM a minute later if it has not);
## the Debian packages the Patroni mode needs (patroni, etcd-server, etcd-client) are installed with
## apt-get when a command is missing. Never part of `make test`.
DRILL_TIMEOUT ?= 180
DRILL_SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DRILL_MODES := "region-failover" "region-failover --async --link-stall 1" "region-failover --failover patroni" \
	"region-failover --failover patroni --async --link-stall 1" "db-failover" "db-failover --async --link-stall 1" \
	"scheduler-kill" "worker-stall"
.PHONY: drills
drills: $(DEV)
	@command -v patroni >/dev/null && command -v etcd >/dev/null && command -v etcdctl >/dev/null || { \
	  $(DRILL_SUDO) apt-get update && \
	  $(DRILL_SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
	    patroni etcd-server etcd-client; }
	@failed=""; for args in $(DRILL_MODES); do \
	  echo "== kairos drill $$args"; \
	  timeout -s TERM $$(( $(DRILL_TIMEOUT) + 60 )) $(BIN)/kairos drill $$args --timeout $(DRILL_TIMEOUT) \
	    || failed="$$failed; $$args"; \
	done; \
	KAIROS_PATRONI_DRILL=1 $(PY) -m pytest -q -p no:cacheprovider -rs tests/chaos/test_drill_patroni.py \
	  || failed="$$failed; test_drill_patroni.py"; \
	if [ -n "$$failed" ]; then echo "drills failed: $${failed#; }"; exit 1; fi

clean:
	rm -rf $(VENV) .kairos
