# Two commands do everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONFIG ?= examples/monitor.yaml
# The embedded database of `make run` and `make demo` (only theirs: the tests make their own).
run demo: export SITEMAP_MONITOR_DATABASE_URL ?= sqlite:///./sitemap-monitor.db

.PHONY: run demo test test-stress lint typecheck pytest bench install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# An editable install leaves the package uncompiled (a wheel install, as in the image, compiles
# it); compiled here once, the CLI does not compile its modules at every start (~0.08 s).
$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	$(BIN)/python -m compileall -q monitor migrations
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	$(BIN)/python -m compileall -q monitor migrations
	touch $@ $(VENV)/.installed-run

install: $(VENV)/.installed-run

## run: install, migrate the embedded SQLite database, start the daemon on $(CONFIG)
run: $(VENV)/.installed-run
	$(BIN)/sitemap-monitor db upgrade
	$(BIN)/sitemap-monitor run --config $(CONFIG)

## demo: a local site whose sitemap changes every few seconds, and the daemon watching it
demo: $(VENV)/.installed-run
	$(BIN)/sitemap-monitor demo

## test: lint, type-check, import contracts and the whole test suite
test: $(VENV)/.installed-test lint typecheck pytest

## test-stress: `make test` three times (STRESS_RUNS) beside two CPU burners: a busy machine
STRESS_RUNS ?= 3
test-stress: $(VENV)/.installed-test
	bash tests/stress.sh $(STRESS_RUNS)

lint: $(VENV)/.installed-test
	$(BIN)/ruff check monitor tests migrations
	$(BIN)/lint-imports

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy

# The tests spend most of their time waiting on daemons, servers and browsers, so two worker
# processes halve the suite's time on two cores; a test file runs whole on one worker (its
# shared daemons start once). PYTEST_WORKERS=0 runs everything in one process.
PYTEST_WORKERS ?= 2
pytest: $(VENV)/.installed-test
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

## bench: the benchmark against advertools and ultimate-sitemap-parser (tests/benchmarks)
bench:
	bash tests/benchmarks/setup.sh
	.venv-bench/bin/python tests/benchmarks/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .venv-bench .pytest_cache .mypy_cache .ruff_cache
