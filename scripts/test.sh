#!/usr/bin/env bash
# The README's test command: installs what is missing, builds everything with
# the `ci` preset and runs every test (unit, lit, examples, fuzzers), and
# first the ThreadSanitizer build of the concurrency test (FLASHJIT_TSAN=0
# skips it). [gpu] tests skip with a visible message on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
cmake --preset ci
cmake --build --preset ci
# ThreadSanitizer (issue 21, §4): only the concurrency test and what it
# links are built (preset tsan, build/tsan), then run; before the main run
# so that CTest's closing summary is the whole suite's. A cold
# ThreadSanitizer build of the frontend, runtime and compiler takes ~1,400
# CPU-seconds (~12 min on 2 cores; later runs hit ccache), the test ~8 s.
if [[ "${FLASHJIT_TSAN:-1}" == 1 ]]; then
  cmake --preset tsan >/dev/null
  cmake --build --preset tsan
  ctest --preset tsan
fi
ctest --preset ci -j2 "$@"
