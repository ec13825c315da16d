# Two commands on a fresh machine: `make demo` (the whole comparison) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SCHEMES ?= none,sinusoidal,learned,rope,alibi
LENGTHS ?= 256,512,1024

.PHONY: demo test test-slow test-fast lint install clean

# the wall time of the trainings and the eval is printed last (the install is not in it); from 4 cores
# the trainings run side by side (scripts/demo_launcher.py)
demo: $(VENV)/.installed
	@start=$$(date +%s); set -e; \
	side=$$($(BIN)/python scripts/demo_launcher.py $(SCHEMES)); \
	echo "$(BIN)/posenc train -m experiment=demo scheme=$(SCHEMES) $$side"; $(BIN)/posenc train -m experiment=demo scheme=$(SCHEMES) $$side; \
	echo "$(BIN)/posenc eval --lengths $(LENGTHS)"; $(BIN)/posenc eval --lengths $(LENGTHS); \
	took=$$(( $$(date +%s) - start )); \
	echo "One seed per scheme at the demo's budget (experiment=demo: training length 128, batch 8), evaluated at 2×/4×/8× it. The README's headline (the default recipe at 256, 3 seeds, mean ± std): bash scripts/reproduce_table.sh"; \
	echo "make demo: the trainings (scheme=$(SCHEMES)) and the eval in $$((took / 60)) min $$((took % 60)) s"

# the maths, configs and refusals, and a few tiny CLI runs (tiny_run): a few minutes on 2 cores
test: $(VENV)/.installed
	$(BIN)/python -m pytest -m "not slow or tiny_run"

# the rest of the suite: the trainings, subprocesses, kills, launchers and HF models (CI runs it after lint)
test-slow: $(VENV)/.installed
	$(BIN)/python -m pytest -m "slow and not tiny_run"

# the edit loop: the maths, configs and refusals, without trainings or subprocesses (under a minute)
test-fast: $(VENV)/.installed
	$(BIN)/python -m pytest -m "not slow"

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports   # the layers of pyproject.toml [tool.importlinter]: imports only run downward
	$(BIN)/python scripts/import_cycles.py   # and no cycle inside a layer, imports in functions counted
	$(BIN)/python scripts/function_sizes.py   # no function over 60 lines, keyword-only past the third; no module over 350
	$(BIN)/python scripts/layer_climbs.py --check   # eval's options and train's args climb back up the layers at most 8 and 12 times
	$(BIN)/mypy --follow-imports=silent --ignore-missing-imports scripts/eval_targets_conform.py   # eval targets
	$(BIN)/python scripts/docs_check.py   # every test, path, option, config key and heading link the docs name exists; no process talk; each changing figure in its one home

install: $(VENV)/.installed

# torch first and pinned: 2.13.0's CPU wheel is what a laptop needs, and an unpinned request
# would pull a multi-GB CUDA build. The extras the tests exercise are installed too: cluster (Hydra
# joblib + submitit launchers), track (TensorBoard, Weights & Biases), data (BPE tokenizer, datasets),
# hf (transformers, safetensors: `posenc eval hf:…` and `posenc export`; their tests build tiny models).
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[test,cluster,track,data,hf]'
	touch $@

clean:
	rm -rf $(VENV) outputs/runs outputs/sweeps outputs/eval
