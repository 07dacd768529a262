# Two entry points: `make run` (the paper's workflow) and `make test` (the test suite).
# Each sets up .venv first, so both work on a fresh clone with only Python 3.11.
PYTHON ?= python3.11
VENV := .venv
export PATH := $(abspath $(VENV))/bin:$(PATH)
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e ".[test]"
	touch $(STAMP)

.PHONY: setup run quick test test-fast test-cluster lint bench
setup: $(STAMP)

# The config is checked first: Snakemake's own message for malformed YAML names no line.
run: $(STAMP)
	$(VENV)/bin/python -m basis config config/config.yaml
	$(VENV)/bin/snakemake --cores all

quick: $(STAMP)
	$(VENV)/bin/python -m basis config config/quick.yaml
	$(VENV)/bin/snakemake --cores all --configfile config/quick.yaml

# One pytest worker per core (at most 4); a test module's tests share a worker, so that
# each module's set-up (the end-to-end workflow, ...) runs once. The modules go out in the
# order tests/conftest.py collects them, longest first (xdist's default sends the modules
# with the most tests first, and the longest ones then end the suite on one core).
test: $(STAMP)
	$(VENV)/bin/python -m pytest -q -n auto --maxprocesses 4 --dist loadfile --no-loadscope-reorder

# The cluster path on a live single-node SLURM cluster on localhost (root: it installs and
# starts munge, MariaDB and SLURM's daemons, and tears them down afterwards), and tracking as
# a cluster runs it: an MLflow server on PostgreSQL (installed and started the same way; its
# driver and the basic-auth app are the `server` extra).
SERVER_STAMP := $(VENV)/.server-installed
$(SERVER_STAMP): $(STAMP)
	$(VENV)/bin/pip install --quiet -e ".[server]"
	touch $(SERVER_STAMP)

test-cluster: $(SERVER_STAMP)
	$(VENV)/bin/python -m pytest -q -m cluster --durations=15 tests/cluster

# The edit-test loop: everything but the end-to-end workflow and the long training runs.
test-fast: $(STAMP)
	$(VENV)/bin/python -m pytest -q -m "not slow and not cluster"

lint: $(STAMP)
	$(VENV)/bin/ruff check basis tests workflow/scripts benchmarks
	$(VENV)/bin/ruff format --check basis tests workflow/scripts benchmarks
	$(VENV)/bin/snakefmt --check Snakefile workflow/rules

bench: $(STAMP)
	$(VENV)/bin/python -m basis bench step --json
	$(VENV)/bin/python -m basis bench reference --n 70000 --json
