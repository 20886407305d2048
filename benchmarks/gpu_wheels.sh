#!/usr/bin/env bash
# What benchmarks/gpu_check.sh installs on a CUDA machine with no network, beside that
# machine's own torch and transformers (and their numpy, sympy, mpmath, packaging): the lmpo
# wheel and everything else its trainer imports. At most 64 MiB in all.
#
#   benchmarks/gpu_wheels.sh PYTHON OUT [TARGET_PYTHON_VERSION]
#
# Pure-Python wheels install anywhere. A compiled dependency is built for PYTHON's version;
# with TARGET_PYTHON_VERSION (say 3.12) it is replaced by that version's manylinux wheel
# from the package index, or, where the index has none, by its source archive, which
# gpu_check.sh builds on the CUDA machine (which then needs a C compiler).
set -euo pipefail
py="$1"; out="$2"; target="${3:-}"
[[ "$py" == */* ]] && py="$(cd "$(dirname "$py")" && pwd)/$(basename "$py")"
rm -rf "$out" && mkdir -p "$out/deps"
"$py" -m pip wheel -q --no-deps -w "$out" .
rg=$("$py" -c "import importlib.metadata as m; print(m.version('reasoning-gym'))")
"$py" -m pip wheel -q -w "$out/deps" rich pyyaml "reasoning-gym==$rg"
cd "$out/deps"
rm -f numpy-* sympy-* mpmath-* packaging-*
here=$("$py" -c "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')")
if [ -n "$target" ] && [ "cp${target/./}" != "$here" ]; then
  for whl in *-"$here"-*.whl; do
    [ -e "$whl" ] || continue
    name=$(echo "$whl" | cut -d- -f1); version=$(echo "$whl" | cut -d- -f2)
    rm "$whl"
    "$py" -m pip download -q --no-deps -d . --only-binary=:all: --python-version "$target" \
      --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux_2_28_x86_64 "$name==$version" 2>/dev/null \
    || "$py" -m pip download -q --no-deps -d . --no-binary=:all: "$name==$version"
  done
fi
mv ./* .. && cd .. && rmdir deps
ls | grep -v -e '^lmpo-' -e '^requirements.txt$' | sed 's/-[0-9].*//' > requirements.txt
size=$(du -sm . | cut -f1); echo "$out: $size MiB"
[ "$size" -le 64 ] || { echo "gpu-wheels: over 64 MiB" >&2; exit 1; }
