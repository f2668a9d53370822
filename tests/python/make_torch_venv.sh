#!/usr/bin/env bash
# make_torch_venv.sh PYTHON VENV: a venv at VENV with torch for the torch
# tests on the CPU (flashjit.torch's custom ops and autograd, torch.compile),
# made once (a stamp records this script's hash). PyPI's torch 2.11 (the GPU
# machine's version) is built against CUDA 13 and loads its libraries at
# import even on a machine without a GPU: the system's CUDA 13 toolkit
# provides most of them (run_torch_pytest.sh puts it on the loader path),
# these wheels the rest (cuSPARSELt, NVSHMEM, cuFile), all without their
# own dependencies (the rest of the CUDA wheels, several GB, stay out).
set -euo pipefail
python=$1 venv=$2
stamp=$venv/.flashjit-torch
want=$(sha256sum "$0" | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$want" && -x $venv/bin/python ]]; then
  echo "venv $venv is up to date"
  exit 0
fi
rm -rf "$venv"
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --disable-pip-version-check -q)
"${pip[@]}" numpy pytest typing_extensions sympy networkx jinja2 fsspec \
  filelock
"${pip[@]}" --no-deps torch==2.11.0 nvidia-cusparselt-cu13==0.8.0 \
  nvidia-nvshmem-cu13==3.4.5 nvidia-cufile==1.20.0.107
echo "$want" > "$stamp"
"$venv/bin/python" -m pip list --disable-pip-version-check 2>/dev/null \
  | grep -Ei '^(numpy|pytest|torch) '
