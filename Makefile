# Every target creates .venv if missing and installs the project into it,
# so `make demo` or `make test` alone does all set-up on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-tools bench lint fmt typecheck clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev,postgres]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/dts demo

# Real services some tests run: Prometheus (monitoring) and PostgreSQL (MetaService on a
# shared database), from Debian. Installed here when missing and we are root with apt-get;
# otherwise those tests skip with a note.
test-tools:
	@missing=""; command -v prometheus >/dev/null || missing="prometheus"; \
	  ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing="$$missing postgresql"; \
	  [ -z "$$missing" ] || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	  --no-install-recommends $$missing >/dev/null; } \
	  || echo "note: could not install$$missing (needs root); those tests will be skipped"

test: $(STAMP) test-tools
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python -m pytest -q tests

bench: $(STAMP)
	$(BIN)/python -m bench.run

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: $(STAMP)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
