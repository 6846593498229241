# Set-up and entry points. Every target creates or reuses .venv and installs what it needs.
#   make run     train GraphSAGE on a generated graph with 2 local workers (the quickstart)
#   make test    run the test suite
# CUDA: make TORCH_SPEC=torch==2.13.0 TORCH_INDEX=https://download.pytorch.org/whl/cu126 run
PYTHON      ?= python3
VENV        ?= .venv
TORCH_SPEC  ?= torch==2.13.0
# Empty = the CPU wheel: a local wheel directory when pip is configured with one,
# else PyTorch's CPU index (never PyPI's default Linux wheel, which is a multi-GB CUDA build).
TORCH_INDEX ?=
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.graphdist-installed
ARGS        ?=
# pytest-xdist processes: most tests wait on spawned workers and timeouts, so 2 cut the wall
# time by a third on 2 cores (396 -> 260 s here); TEST_JOBS=0 runs in one process.
TEST_JOBS   ?= 2

.PHONY: run test bench venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip >/dev/null 2>&1 || true
	@if $(PY) -c "import torch" 2>/dev/null; then \
	    echo "torch $$($(PY) -c 'import torch; print(torch.__version__)') already installed"; \
	elif [ -n "$(TORCH_INDEX)" ]; then \
	    $(PY) -m pip install "$(TORCH_SPEC)" --index-url "$(TORCH_INDEX)"; \
	elif ls $$($(PY) -m pip config get global.find-links 2>/dev/null || echo /nonexistent)/torch-2.13.0+cpu* >/dev/null 2>&1; then \
	    $(PY) -m pip install "$(TORCH_SPEC)"; \
	else \
	    $(PY) -m pip install "$(TORCH_SPEC)" --index-url https://download.pytorch.org/whl/cpu; \
	fi
	$(PY) -m pip install -q -e ".[dev]"
	@touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/graphdist-train $(ARGS)

test: $(STAMP)
	GRAPHDIST_DATA=$${GRAPHDIST_DATA:-$(CURDIR)/../shared/datasets} $(PY) -m pytest tests -q -n $(TEST_JOBS) $(ARGS)

bench: $(STAMP)
	$(PY) bench/bench_partition.py

clean:
	rm -rf $(VENV) build *.egg-info
