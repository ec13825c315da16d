# Two commands on a fresh machine: `make demo` (the whole comparison) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SCHEMES ?= none,sinusoidal,learned,rope,alibi
LENGTHS ?= 512,1024,2048

.PHONY: demo test install clean

demo: $(VENV)/.installed
	$(BIN)/posenc train -m scheme=$(SCHEMES)
	$(BIN)/posenc eval --lengths $(LENGTHS)

test: $(VENV)/.installed
	$(BIN)/python -m pytest

install: $(VENV)/.installed

# torch first and pinned: 2.13.0's CPU wheel is what a laptop needs, and an unpinned request
# would pull a multi-GB CUDA build. The cluster extra (Hydra joblib + submitit launchers) and the
# track extra (TensorBoard, Weights & Biases) are tested, so the tests install them; the hf extra
# (transformers, safetensors) is what `posenc eval hf:…` and `posenc export` need, and their tests
# build tiny models locally.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[test,cluster,hf,track]'
	touch $@

clean:
	rm -rf $(VENV) outputs/runs outputs/sweeps outputs/eval
