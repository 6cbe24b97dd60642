# Two commands are all a newcomer needs: `make run` (the series, end to end) and `make test`.
# Both set up .venv themselves on first use.

PYTHON ?= python3
# Python's own default, cached bytecode, even where the environment turns it off (this project's CI
# machines set PYTHONDONTWRITEBYTECODE=1): else every process compiles mgtutor again and pytest rewrites
# every test module's asserts again at each start.
unexport PYTHONDONTWRITEBYTECODE
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.mgtutor-installed
# Extra arguments for the series runner, e.g. make run RUN_ARGS="-p EPOCHS 5 -p N_DEVICES 4"
RUN_ARGS ?=
# Extra arguments for pytest, e.g. make test TEST_ARGS="-k data"
TEST_ARGS ?=
PORT ?= 8888
# make wheelhouse WHEELS=dir: every wheel setup needs, for this platform; make setup WHEELS=dir: install
# from that folder alone, with no index (a classroom without internet).
WHEELS ?=
PIP_SOURCE = $(if $(WHEELS),--no-index --find-links $(call _shell_quote,$(WHEELS)))
# make run PRESET=low-memory: per-lesson overrides (mgtutor/classroom/presets.py) below the command line's own;
# `make check` offers it where the laptop has too little memory for the classroom defaults. Without PRESET,
# make run takes the slow-laptop preset where its reference step says the defaults would overrun the slot;
# PRESET=none keeps the defaults.
PRESET ?=
# Where `make run` reads the notebooks and creates run folders, and the folder `make lab` opens.
NOTEBOOKS ?= notebooks
RUNS ?= runs

# `make run EPOCHS=5 N_DEVICES=4`: every ALL_CAPS variable given on the make command line that is not
# one of this Makefile's own becomes `-p NAME VALUE` for the runner, which checks names and types
# before any notebook starts. Values with anything but plain characters are single-quoted for the
# shell (like Python's shlex.quote), so spaces, quotes and $ survive.
OWN_VARIABLES := PYTHON VENV BIN STAMP RUN_ARGS TEST_ARGS CHECK_ARGS PORT NOTEBOOKS RUNS WHEELS PIP_SOURCE PRESET
_CAPS_CHARS := A B C D E F G H I J K L M N O P Q R S T U V W X Y Z 0 1 2 3 4 5 6 7 8 9 _
_PLAIN_CHARS := $(_CAPS_CHARS) a b c d e f g h i j k l m n o p q r s t u v w x y z . , : / = + - @ %
# $(call _without,TEXT,CHARS): TEXT with every one of CHARS removed.
_without = $(if $(2),$(call _without,$(subst $(firstword $(2)),,$(1)),$(wordlist 2,$(words $(2)),$(2))),$(1))
_if_caps = $(if $(call _without,$(1),$(_CAPS_CHARS)),,$(1))
_is_plain = $(if $(call _without,$(1),$(_PLAIN_CHARS)),,plain)
_shell_quote = $(if $(and $(1),$(call _is_plain,$(1))),$(1),'$(subst ','\'',$(1))')
COMMAND_LINE_VARIABLES = $(sort $(foreach v,$(.VARIABLES),$(if $(filter command line,$(origin $(v))),$(v))))
PARAMETERS = $(filter-out $(OWN_VARIABLES),$(foreach v,$(COMMAND_LINE_VARIABLES),$(call _if_caps,$(v))))
NOT_PARAMETERS = $(filter-out $(OWN_VARIABLES) $(PARAMETERS),$(COMMAND_LINE_VARIABLES))
PARAMETER_ARGS = $(foreach v,$(PARAMETERS),-p $(v) $(call _shell_quote,$(value $(v))))

.PHONY: setup run capstone capstone-long test test-all check lab lint lesson-code clean reset wheelhouse cluster-up cluster-down

setup: $(STAMP)

# Rebuilt only when the package's requirements change, so repeating `make setup` is cheap.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(PIP_SOURCE) --upgrade pip setuptools wheel
	$(BIN)/python -m pip install --quiet $(PIP_SOURCE) -e '.[dev]'
	$(BIN)/python -m ipykernel install --sys-prefix --name mgtutor --display-name "Python (mgtutor)" >/dev/null
	touch $(STAMP)

wheelhouse:
	@test -n "$(WHEELS)" || { echo "make wheelhouse: say where, e.g. make wheelhouse WHEELS=wheels" >&2; exit 2; }
	$(PYTHON) -m pip download --quiet --dest $(call _shell_quote,$(WHEELS)) --only-binary=:all: pip setuptools wheel
	$(PYTHON) -m pip download --quiet --dest $(call _shell_quote,$(WHEELS)) '.[dev]'
	rm -f $(call _shell_quote,$(WHEELS))/mgtutor-*
	@echo "wheelhouse: $$(ls $(call _shell_quote,$(WHEELS)) | wc -l) files, $$(du -sh $(call _shell_quote,$(WHEELS)) | cut -f1) in $(WHEELS)"

run: setup
	$(if $(NOT_PARAMETERS),$(warning make run: ignoring $(NOT_PARAMETERS): notebook parameters are ALL_CAPS))
	TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/python -m mgtutor.classroom.runner --notebooks $(call _shell_quote,$(NOTEBOOKS)) \
		--runs $(call _shell_quote,$(RUNS)) $(if $(PRESET),--preset $(call _shell_quote,$(PRESET))) $(RUN_ARGS) \
		$(PARAMETER_ARGS)

# The capstone alone (16), its whole recipe on all of CIFAR-10, into its own run folder under RUNS.
# `make run` gives it a classroom budget instead (the runner's SERIES_DEFAULTS); MINUTES=... sets one.
capstone: setup
	TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/python -m mgtutor.classroom.runner --notebooks $(call _shell_quote,$(NOTEBOOKS)) \
		--runs $(call _shell_quote,$(RUNS)) --only 16 $(RUN_ARGS) $(PARAMETER_ARGS) \
		$(if $(filter MINUTES,$(PARAMETERS)),,-p MINUTES None)

# The 90 % recipe (CAPSTONE_LONG in mgtutor/classroom/runner.py: airbench's widths, 14 epochs), lesson 16
# alone, into its own run folder under RUNS; about 30 minutes of training on a 2-core AMD EPYC.
capstone-long: setup
	TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/python -m mgtutor.classroom.runner --notebooks $(call _shell_quote,$(NOTEBOOKS)) \
		--runs $(call _shell_quote,$(RUNS)) --only 16 --capstone-long $(RUN_ARGS) $(PARAMETER_ARGS)

# Preflight for a classroom laptop: versions, a 2-device smoke step, data, ports, disk, memory.
# Exits non-zero on any FAIL line. CHECK_ARGS="--allow-synthetic" or "--ports 12345 12346".
CHECK_ARGS ?=
check: setup
	TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/python -m mgtutor.classroom.preflight $(CHECK_ARGS)

# Two tiers (tests marked `slow` are the difference): `make test`, about 3 minutes, for every change;
# `make test-all`, everything CI runs (every notebook and solution, the child processes): its budget and where
# its time goes are in CONTRIBUTING.md; pytest prints its own time and slowest tests.
test: setup
	$(BIN)/python -m pytest -n 2 --dist worksteal -m "not slow" $(TEST_ARGS)

test-all: setup
	$(BIN)/python -m pytest -n 2 --dist worksteal --durations=40 $(TEST_ARGS)

# The notebooks ask for the kernel "python3"; Jupyter starts it with the server's own Python, the venv's.
# Jupyter refuses to run as root (classroom containers often do) unless told it may.
lab: setup
	TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/python -m jupyter lab --ServerApp.root_dir=$(call _shell_quote,$(NOTEBOOKS)) \
		--port=$(PORT) $(if $(filter 0,$(shell id -u)),--allow-root)

lint: setup
	$(BIN)/ruff check mgtutor tests notebooks benchmarks tools cluster

# One source: the package's copy of what a lesson writes out is generated from the lesson's #@save cells.
lesson-code: setup
	$(BIN)/python tools/lesson_code.py

# Between classes: every notebook back to its committed state, and every working folder, checkpoint
# and .ipynb_checkpoints under notebooks/ gone. It lists what it resets; learners' edits are lost.
reset:
	@git status --porcelain --untracked-files=all --ignored -- notebooks | sed 's/^/reset: /'
	@git checkout -- notebooks
	@git clean -fdxq -- notebooks
	@echo "reset: notebooks/ is as committed"

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

# A real two-node Slurm cluster on this machine (cluster/slurm/local_cluster.sh): network and hostname
# namespaces node1 (10.213.0.1, CPU 0, head) and node2 (10.213.0.2, CPU 1). Both need root:
# `sudo make cluster-up`, then `sudo cluster/slurm/local_cluster.sh exec sinfo`; `sudo make cluster-down`.
cluster-up:
	bash cluster/slurm/local_cluster.sh up

cluster-down:
	bash cluster/slurm/local_cluster.sh down
