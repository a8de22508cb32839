# Two entry points for a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
SDK := sdk/python
# The server needs kairos-sdk from $(SDK), never from an index: both are installed in one pip call.
RUNTIME := $(VENV)/.installed-runtime
DEV := $(VENV)/.installed-dev

.PHONY: run test lint typecheck install proto bench bench-probes loadtest clean

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

## ruff over the server, the SDK, tests and benchmarks (generated modules excluded, see pyproject.toml).
lint: $(DEV)
	$(BIN)/ruff check .

## mypy, strict on app/domain and app/store (configured under [tool.mypy] in pyproject.toml).
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
	$(PY) -m app.rpc.codegen

## The end-to-end herd benchmark (REST submit -> scheduler -> executor -> SDK workers, each its own
## process), never part of the suite; BENCH_ARGS="--scenarios herd10k,light" picks scenarios.
## Component probes (seeded rows, skipped tiers): bench-probes.
bench: $(DEV)
	$(PY) loadtest/herd.py $(BENCH_ARGS)

bench-probes: $(DEV)
	$(PY) loadtest/dispatch_bench.py
	$(PY) loadtest/lease_bench.py
	$(PY) loadtest/db_call_probe.py
	$(PY) loadtest/pg_cost_probe.py
	$(PY) loadtest/warmup_probe.py
	$(PY) loadtest/heap_memory.py

## Locust against a throwaway `kairos up --demo`, headless, bounded (LOCUST_ARGS="-u 50 -t 60s --shape herd").
loadtest: $(DEV)
	$(PY) loadtest/run_locust.py $(LOCUST_ARGS)

clean:
	rm -rf $(VENV) .kairos
