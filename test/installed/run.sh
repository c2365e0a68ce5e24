#!/usr/bin/env bash
# An installed tilec, as a user without the source tree has it: `pip install .` (not editable,
# no extras) into a fresh virtual environment, then, from a directory outside the checkout,
# the README's main command, `tilec bench --quick`, the CMake package (examples/cmake), and
# --target ptx naming the extra it needs.  .ci/run runs it after the README's test command.
#   test/installed/run.sh [WORKDIR]      (default: a new temporary directory, removed after)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=${1:-$(mktemp -d)}
[ $# -ge 1 ] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work" && cd "$work"
step() { printf '\n== installed tilec: %s\n' "$*"; }

step "pip install . into a fresh venv"
python3 -m venv venv
venv/bin/python -m pip install -q --upgrade pip
venv/bin/pip install -q "$repo"
case "$(venv/bin/python -c 'import tilec; print(tilec.__file__)')" in
  "$repo"/*) echo "tilec was imported from the checkout, not the installed copy"; exit 1 ;;
esac
export TILEC_CACHE_DIR="$work/cache"

step "tilec verify ops/swiglu.tile (the README's main command)"
venv/bin/tilec verify "$repo/ops/swiglu.tile"

step "tilec bench --quick --no-torch"
venv/bin/tilec bench --quick --no-torch -o bench.md > /dev/null
grep -q "^| swiglu | float16 | out= |" bench.md
grep -q "tilec 0.1.0, installed" bench.md

step "the CMake package: examples/cmake against the installed tilec"
cp -r "$repo/examples/cmake" cmake-example
PATH="$work/venv/bin:$PATH" cmake -S cmake-example -B cmake-build \
  -Dtilec_DIR="$(venv/bin/tilec --cmake-dir)" > /dev/null
PATH="$work/venv/bin:$PATH" cmake --build cmake-build > /dev/null
cmake-build/demo

step "--target ptx without the extra names it"
if venv/bin/tilec "$repo/ops/swiglu.tile" --target ptx -o swiglu.so 2> ptx.err; then
  echo "--target ptx built without the NVIDIA wheels"; exit 1
fi
grep -F "error: --target ptx needs ptxas: pip install 'tilec[ptx]'" ptx.err

step "all passed"
