#!/usr/bin/env bash
# Installs what flashjit needs on a Debian 12 machine, idempotently: packages
# already present are not touched. Both README commands call this first.
set -euo pipefail

packages=(cmake g++ ninja-build ccache llvm-22-dev libmlir-22-dev mlir-22-tools
          llvm-22-tools catch2 libfmt-dev pkg-config python3 python3-venv)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq \
    --no-install-recommends "${missing[@]}"
fi

# Optional: clang with libFuzzer and ThreadSanitizer runtimes, for the fuzz
# targets (tests/fuzz, CTest fuzz.*) and the `tsan` preset. Without them the
# build and every other test run as before (the fuzzers are skipped).
optional=(clang-22 libclang-rt-22-dev)
missing=()
for p in "${optional[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing optional ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  { "${sudo_cmd[@]}" apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq \
      --no-install-recommends "${missing[@]}"; } \
    || echo "setup: note: ${missing[*]} not installed; fuzzers skipped" >&2
fi

if [[ ! -x /usr/local/cuda/bin/ptxas ]]; then
  echo "setup: note: CUDA 13 not found at /usr/local/cuda; GPU code generation checks will be skipped" >&2
fi
