#!/bin/sh
# Install torch into a venv: from $TORCH_INDEX when it is set and reachable, else from pip's default index.
# usage: TORCH_INDEX=https://download.pytorch.org/whl/cpu sh .ci/torch_install.sh .venv/bin/python torch==2.13.0 [constraints.txt]
# With a constraints file, torch's own dependencies (sympy, networkx, ...) get its pins too.
set -eu
py=$1
spec=$2
constrain=""
if [ $# -ge 3 ] && [ -n "$3" ]; then constrain="-c $3"; fi
index=${TORCH_INDEX:-}
if "$py" -c "import torch" 2>/dev/null && [ "$("$py" -c 'import torch; print(torch.__version__.split("+")[0])')" = "${spec#torch==}" ]; then
    echo "torch ${spec#torch==} already installed"
    exit 0
fi
if [ -n "$index" ]; then
    # a short probe: an unreachable index must not cost pip's long retries
    if "$py" - "$index" <<'PY'
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=5)
except Exception as err:
    print(f"torch index {sys.argv[1]} unreachable ({type(err).__name__}); using pip's default index", file=sys.stderr)
    sys.exit(1)
PY
    then
        echo "installing $spec from $index"
        # torch alone from that index, then its pure-Python dependencies from pip's own index ("torch==X"
        # is already met by the local X+cpu build, so the second call adds only what torch needs)
        "$py" -m pip install -q --no-deps --index-url "$index" "$spec" && "$py" -m pip install -q $constrain "$spec" && exit 0
        echo "install from $index failed; using pip's default index" >&2
    fi
fi
echo "installing $spec from pip's default index"
"$py" -m pip install -q $constrain "$spec"
