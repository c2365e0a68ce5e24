#!/usr/bin/env bash
# The GPU check of the PTX backend (see bench/gpu_check.py).
#   bench/gpu_check.sh prepare [BUNDLE [--only PART...]]  here: build the ptx libraries and
#                                                       references (parts: programs bench gemm)
#   bench/gpu_check.sh run [BUNDLE]       on the GPU machine: check them, then benchmark
#                                         (exit status 2 at once where there is no GPU)
# BUNDLE defaults to build/gpu_check; it holds everything the GPU machine needs (< 64 MiB).
set -euo pipefail
mode=${1:?usage: gpu_check.sh prepare|run [BUNDLE]}
bundle=${2:-build/gpu_check}
here=$(cd "$(dirname "$0")" && pwd)
if [ "$mode" = prepare ]; then
  python=${PYTHON:-$here/../.venv/bin/python}
  exec "$python" "$here/gpu_check.py" prepare "$bundle" "${@:3}"
fi
cd "$bundle"
exec timeout 300 "${PYTHON:-python3}" gpu_check.py run .
