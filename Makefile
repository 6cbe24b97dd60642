# Two commands are all a newcomer needs: `make run` (the series, end to end) and `make test`.
# Both set up .venv themselves on first use.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.mgtutor-installed
# Extra arguments for the series runner, e.g. make run RUN_ARGS="-p EPOCHS 5 -p N_DEVICES 4"
RUN_ARGS ?=
# Extra arguments for pytest, e.g. make test TEST_ARGS="-k data"
TEST_ARGS ?=
PORT ?= 8888

.PHONY: setup run test lab lint clean

setup: $(STAMP)

# Rebuilt only when the package's requirements change, so repeating `make setup` is cheap.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m ipykernel install --sys-prefix --name mgtutor --display-name "Python (mgtutor)" >/dev/null
	touch $(STAMP)

run: setup
	TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/python -m mgtutor.series --notebooks notebooks --runs runs $(RUN_ARGS)

test: setup
	$(BIN)/python -m pytest -n 2 $(TEST_ARGS)

lab: setup
	$(BIN)/jupyter lab --notebook-dir=notebooks --port=$(PORT)

lint: setup
	$(BIN)/ruff check mgtutor tests notebooks benchmarks

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
