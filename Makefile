# raycolloc: `make demo` runs a local-mode sweep, `make test` runs the tests.
# Both create .venv on first use (torch, ray, timm, hydra, ...), so a fresh machine needs only Python 3.11+.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export RAY_AUTH_MODE ?= disabled
export RAY_USAGE_STATS_ENABLED ?= 0
# pip compiles every module of the venv (torch's thousands, most never imported): 85 of the venv's
# 165 s on 2 cores. It installs without that, and Python caches the bytecode of what is imported,
# once, as it runs (so the environment must let it: some machines set PYTHONDONTWRITEBYTECODE).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: venv demo check test test-fast test-gpu report clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile -e '.[test]'
	touch $@

venv: $(VENV)/.installed

# A local-mode sweep: simulated GPUs, tiny CPU workloads, real Ray, Hydra and Parquet.
demo: venv
	$(PY) -m raycolloc.sweep -m degree=1,2,3 mode=naive,mps workload=tiny_cnn cluster=local out_dir=results/demo
	$(PY) -m analysis.report $$(ls -d results/demo/multirun/*/* | tail -1) --out results/demo/report

# The linter (ruff: pycodestyle, pyflakes, isort, pyupgrade, bugbear, unused `noqa`) and the type checker
# (mypy over raycolloc, analysis and hydra_plugins); both configured in pyproject.toml. `.ci/run` runs it first.
check: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

# The whole CPU suite, the long (`slow`) tests included: what CI runs. Two pytest-xdist workers, each
# with its own Ray instance and simulated GPUs (tests/conftest.py), take whole test modules, the
# longest first (tests/durations.json; `pytest --store-durations ...` rewrites it).
test: venv
	$(PY) -m pytest -m 'not gpu' -n 2 --dist loadfile --no-loadscope-reorder --durations=25

# The quick tier while developing: no `slow` test (nothing trains, no Ray starts), no `gpu` one.
test-fast: venv
	$(PY) -m pytest -n 2

# On a machine with an NVIDIA GPU (the device machine: see jobs/device_check.sh).
test-gpu: venv
	$(PY) -m pytest -m gpu

clean:
	rm -rf $(VENV) results .pytest_cache
