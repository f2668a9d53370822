#!/usr/bin/env bash
# The README's test command: installs what is missing, builds everything with
# the `ci` preset and runs every test (unit, lit, examples, fuzzers), and
# with FLASHJIT_TSAN=1 first the ThreadSanitizer build of the concurrency
# test. [gpu] tests skip with a visible message on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
cmake --preset ci
cmake --build --preset ci
# ThreadSanitizer (issue 21, §4), with FLASHJIT_TSAN=1: only the concurrency
# test and what it links are built (preset tsan, build/tsan), then run;
# before the main run so that CTest's closing summary is the whole suite's.
# Opt-in for now: a cold ThreadSanitizer build of the frontend, runtime and
# compiler costs well over 12 minutes on a 2-core machine (later runs hit
# ccache).
if [[ "${FLASHJIT_TSAN:-0}" == 1 ]]; then
  cmake --preset tsan >/dev/null
  cmake --build --preset tsan
  ctest --preset tsan
fi
ctest --preset ci -j2 "$@"
