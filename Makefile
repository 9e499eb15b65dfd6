# Rosette: two set-up commands, `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.rosette-installed
HOST   ?= 127.0.0.1
PORT   ?= 7860
SERVE_ARGS ?=
# pytest-xdist workers for `make test`: 0 runs the suite in one process, the steadiest on 2 cores. The suite is
# bound by CPU there (a browser test keeps 1.3 cores busy: chromium, the server, pytest): two workers gained about
# 2 minutes of 30 with the browser tests in one group, and with the browser modules spread over both, two servers
# and two chromiums at once slowed tests past their timeouts. TEST_WORKERS=auto on a machine with more cores.
TEST_WORKERS ?= 0

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
