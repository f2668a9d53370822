#!/usr/bin/env bash
# The README's main-job command: installs what is missing, builds, and runs
# the quickstart (a sliding-window + soft-cap variant at N = 4096).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
cmake --preset ci >/dev/null
cmake --build --preset ci --target quickstart
./build/ci/examples/quickstart "$@"
