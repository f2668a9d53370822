#!/usr/bin/env bash
# run_torch_pytest.sh VENV TESTS: tests/python under the torch venv of
# make_torch_venv.sh (CPU tensors; the CUDA cases skip). Fails when torch
# does not import, so the torch tests never skip unseen in CI.
set -euo pipefail
venv=$1 tests=$2
sp=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cuda=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$sp/nvidia/cu13/lib:$sp/nvidia/cusparselt/lib:$sp/nvidia/nvshmem/lib:$cuda/lib64:$cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$venv/bin/python" -c 'import torch; print("torch", torch.__version__)'
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider \
  -o console_output_style=classic "$tests"
