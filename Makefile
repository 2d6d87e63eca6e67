# Two commands on a fresh machine: `make plan` and `make test`. Both install first when .venv is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install plan test bench clean

$(BIN)/trainplan:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, pinned, so that no other package pulls a CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[all]'

install: $(BIN)/trainplan

plan: $(BIN)/trainplan
	$(BIN)/trainplan plan

test: $(BIN)/trainplan
	@bash tests/report/ensure_chromium.sh >/dev/null 2>&1 || echo "chromium could not be installed: the HTML browser test will skip"
	$(BIN)/ruff check --quiet src tests bench
	$(BIN)/python -m pytest -n 2 -q

bench: $(BIN)/trainplan
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) build src/*.egg-info
