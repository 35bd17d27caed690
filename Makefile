# Two commands on a fresh machine: `make run` and `make test`.  Both create .venv when missing.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
OUT    ?= runs/default
# pytest-xdist workers for `make test` / `make test-extended` (`auto`: one per core; CI's 2 cores take the suite
# from about 7 to about 4 minutes).  TEST_WORKERS=0 runs the tests in this process, one after another.
TEST_WORKERS ?= auto
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal

.PHONY: run test test-extended test-slow lint bench docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first, alone and exactly pinned, then the project with its dev and flower extras.
$(STAMP): $(BIN)/python pyproject.toml constraints.txt
	$(BIN)/pip install --disable-pip-version-check -q torch==2.13.0
	$(BIN)/pip install --disable-pip-version-check -q -c constraints.txt -e '.[dev,flower]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/portfed run configs/default.yaml --out $(OUT)

lint: $(STAMP)
	$(BIN)/ruff check portfed tests benchmarks

test: $(STAMP) lint
	$(PYTEST)

# What CI runs after `make test` (.ci/run): the tests marked `extended` — a study through a local Ray head
# (the cluster extra, installed here), the docs' synthetic benchmark tables, re-run and compared, and the slowest
# multi-process and end-to-end tests (two-process sweeps, killed runs, the seeds comparison, the notebook).
test-extended: $(STAMP)
	$(BIN)/pip install --disable-pip-version-check -q -c constraints.txt -e '.[cluster]'
	$(PYTEST) -m extended

test-slow: $(STAMP)
	$(PYTEST) -m slow

# Rewrite the generated parts of docs/ (config reference, tables of shipped configs) from the code;
# `$(BIN)/python -m portfed.docgen --check` only compares.  Runs go to runs/docs/ (reused next time).
docs: $(STAMP)
	$(BIN)/python -m portfed.docgen

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
