# Two entry points for a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test install proto bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

## Start everything on the embedded PostgreSQL and submit a demo job.
run: $(STAMP)
	$(BIN)/kairos up --demo

## The whole suite (unit, integration, API over HTTP, gRPC, chaos with real processes).
test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

## Regenerate the gRPC modules from app/rpc/worker.proto.
proto: $(STAMP)
	$(BIN)/python -m app.rpc.codegen

## Long benchmarks, never part of the suite.
bench: $(STAMP)
	$(BIN)/python loadtest/dispatch_bench.py
	$(BIN)/python loadtest/lease_bench.py

clean:
	rm -rf $(VENV) .kairos
