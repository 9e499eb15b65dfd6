# Rosette: two set-up commands, `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.rosette-installed
HOST   ?= 127.0.0.1
PORT   ?= 7860
SERVE_ARGS ?=
# pytest-xdist workers for `make test`: two on 2 cores (pytest 14:17 and 14:38, the whole `.ci/run` 14:20 and
# 14:40, on fresh clones; 23-28 min in one process; a third worker was slower, the cores are busy 98 %). Each
# module stays on one worker and every browser test shares one group (tests/conftest.py), so one browser and one
# Rosette server run at a time beside the other worker's modules. TEST_WORKERS=0 runs everything in one process;
# TEST_WORKERS=auto on a machine with more cores.
TEST_WORKERS ?= 2

.PHONY: run test bench venv clean-venv browser postgres

venv: $(STAMP)

# Torch first (pip's cap on the project machines takes the wheels on disk),
# then sam2 built against that torch without its CUDA extension, then the project.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q 'torch>=2.5' 'torchvision>=0.20'
	SAM2_BUILD_CUDA=0 $(PIP) install -q --no-build-isolation 'sam2>=1.0'
	$(PIP) install -q -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	HF_HUB_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False $(VENV)/bin/rosette serve --host $(HOST) --port $(PORT) $(SERVE_ARGS)

# The browser tests drive Debian's chromium; install it when missing and we may (root with apt-get).
browser:
	@test -x /usr/bin/chromium || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-dejavu-core; } || \
	  echo "warning: /usr/bin/chromium is missing; the browser tests will fail (apt-get install chromium)"

# The PostgreSQL tests start a throwaway cluster with Debian's initdb/pg_ctl; install them the same way.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; } || \
	  echo "warning: PostgreSQL's initdb is missing; the postgres tests will fail (apt-get install postgresql)"

test: $(STAMP) browser postgres
	$(VENV)/bin/lint-imports
	HF_HUB_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=25 tests

bench: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) tests/benchmarks/run.py

clean-venv:
	rm -rf $(VENV)
