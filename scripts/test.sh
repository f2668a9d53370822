#!/usr/bin/env bash
# The README's test command: installs what is missing, builds everything with
# the `ci` preset and runs every test (unit, lit, examples). [gpu] tests skip
# with a visible message on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
cmake --preset ci
cmake --build --preset ci
ctest --preset ci -j2 "$@"
