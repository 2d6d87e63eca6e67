# Two commands on a fresh machine: `make plan` and `make test`. Each installs what it needs first.
#   make plan: the planner core only (no dependencies: seconds), then a plan;
#   make test: everything (torch, the SageMaker SDK, plotly, the test tools), then every test.
# A stamp file in .venv says what is installed: `make test` upgrades the core-only .venv of
# `make plan`, and `make plan` after `make test` installs nothing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORE := $(VENV)/.installed-core
ALL := $(VENV)/.installed-all

.PHONY: install plan test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(CORE): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --disable-pip-version-check -e .
	touch $@

$(ALL): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --disable-pip-version-check --upgrade pip
	# torch first, pinned, so that no other package pulls a CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[all]'
	# The HyperPod CLI's job models (one pydantic file) for tests/launch/test_hyperpod_eks.py: the
	# package itself pins sagemaker-core < 2 beside the SDK v3, so only its wheel is fetched, unpacked
	# under .venv and never installed.
	$(BIN)/pip download --quiet --disable-pip-version-check --no-deps sagemaker-hyperpod==3.12.0 -d $(VENV)/hyperpod-wheel
	$(BIN)/python -m zipfile -e $(VENV)/hyperpod-wheel/sagemaker_hyperpod-3.12.0-py3-none-any.whl $(VENV)/hyperpod-models
	touch $@ $(CORE)

install: $(ALL)

plan: $(CORE)
	$(BIN)/trainplan plan

test: $(ALL)
	@bash tests/report/ensure_chromium.sh >/dev/null 2>&1 || echo "chromium could not be installed: the HTML browser test will skip"
	$(BIN)/ruff check --quiet src tests bench
	$(BIN)/python -m pytest -n 2 -q

bench: $(ALL)
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) build src/*.egg-info
