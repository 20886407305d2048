#!/usr/bin/env bash
# The GPU path on one CUDA machine with no network, in <= 8 minutes: lmpo and what it needs
# beyond the machine's own torch and transformers are installed from the wheels that
# `make gpu-wheels` prepared in gpu-wheels/ (no model weights travel), then
# benchmarks/gpu_check.py measures sampling vs `generate`, one RL step against its FLOP
# floor and 50 testbed steps, and writes gpu_check.json with the machine's description.
#
#   benchmarks/gpu_check.sh [OUT]          # OUT defaults to benchmarks/results/gpu
#   benchmarks/gpu_check.sh --dry-run [OUT] # the same code on the CPU, tiny sizes, no wheels
#                                           # (with $PYTHON, by default the project's .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
dry=""
if [ "${1:-}" = "--dry-run" ]; then dry="--dry-run"; shift; fi
out="$(realpath -m "${1:-benchmarks/results/gpu}")"
if [ -n "$dry" ]; then
  # PYTHON, else the project's own environment (make install), else python on PATH
  default=python
  [ -x .venv/bin/python ] && default="$PWD/.venv/bin/python"
  py="${PYTHON:-$default}"
else
  wheels=gpu-wheels
  [ -f "$wheels/requirements.txt" ] || { echo "gpu_check: run make gpu-wheels first" >&2; exit 1; }
  # the machine's own torch and transformers stay: the venv sees python3's site-packages,
  # also where python3 is itself a virtual environment (which --system-site-packages skips)
  python3 -m venv --system-site-packages .venv-gpu
  own=$(.venv-gpu/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  python3 -c "import site; print('\n'.join(site.getsitepackages()))" > "$own/host-site.pth"
  # a dependency that came as a source archive (gpu_wheels.sh) builds here, with the
  # machine's own setuptools
  .venv-gpu/bin/python -m pip install -q --no-index --find-links "$wheels" --no-deps \
    --no-build-isolation -r "$wheels/requirements.txt"
  .venv-gpu/bin/python -m pip install -q --no-index --no-deps "$wheels"/lmpo-*.whl
  py="$PWD/.venv-gpu/bin/python"
  export LMPO_HOME="$PWD/.venv-gpu/lmpo-home"  # the warm start is built here, fresh
fi
cd benchmarks
exec timeout 480 "$py" gpu_check.py --out "$out" $dry
