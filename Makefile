# One-command entry points. Everything installs into .venv from a fresh clone.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TORCH_VERSION     := 2.13.0
DEEPSPEED_VERSION := 0.19.8

.PHONY: install demo demo-rollback demo-decay stop status test test-fast gpu-check gpu-prepare gpu-sim clean-runs

install: $(STAMP)

# torch first, pinned to the local CPU wheel; deepspeed last, without build
# isolation, so its build sees that torch instead of pulling another one; on a
# machine without a GPU, DeepSpeed's CPU op compiled now, not in the first launch.
$(STAMP): pyproject.toml Makefile
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11 or pass PYTHON=..."; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip wheel setuptools
	$(BIN)/python -m pip install -q torch==$(TORCH_VERSION)
	$(BIN)/python -m pip install -q -e '.[dev,ray,compare,warc,eval]'
	DS_BUILD_OPS=0 $(BIN)/python -m pip install -q --no-build-isolation deepspeed==$(DEEPSPEED_VERSION)
	$(BIN)/python infra/build_cpu_ops.py
	$(BIN)/python -c "import torch, deepspeed, prefect, mlflow, tokenizers, pyarrow, duckdb; print('installed: torch', torch.__version__, 'deepspeed', deepspeed.__version__, 'prefect', prefect.__version__, 'mlflow', mlflow.__version__)"
	touch $(STAMP)

demo: install
	bash infra/local.sh demo configs/tiny.yaml

# the demo with a loss spike injected at step 121: rollback and skip-ahead as sub-flows, marked on the loss plot
demo-rollback: install
	bash infra/local.sh demo-rollback

# the WSD decay phase: a decay that draws another mix, task evals per checkpoint, a decay branch from step 100
demo-decay: install
	bash infra/local.sh demo-decay

stop:
	bash infra/local.sh down

status:
	bash infra/local.sh status

test: install
	$(BIN)/python -m pytest tests

test-fast: install
	$(BIN)/python -m pytest tests -m "not slow"

# on a GPU node after `make install`: the training program on the GPUs (benchmarks/gpu_check.py)
gpu-check: install
	$(BIN)/python benchmarks/gpu_check.py

# what travels to a GPU machine without network: carried wheels in .gpu/site, prepared tokens in .gpu/prepared.
# There, with no install: PYTHONPATH=.gpu/site python3 benchmarks/gpu_check.py --prepared .gpu/prepared --out "$$OUT"
gpu-prepare: install
	$(BIN)/python infra/gpu_prepare.py

# that command on CPU ranks in a copy of the GPU machine's Python (image packages + carried wheels only)
OUT ?= benchmarks/results
gpu-sim: gpu-prepare
	$(BIN)/python infra/gpu_sim/sim.py run --out "$(OUT)"

clean-runs:
	rm -rf runs
