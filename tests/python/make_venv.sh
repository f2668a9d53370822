#!/usr/bin/env bash
# make_venv.sh PYTHON VENV REQUIREMENTS: a venv at VENV with REQUIREMENTS
# installed from PyPI, made once (a stamp records the requirements' hash).
set -euo pipefail
python=$1 venv=$2 req=$3
stamp=$venv/.flashjit-requirements
want=$(sha256sum "$req" | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$want" && -x $venv/bin/python ]]; then
  echo "venv $venv is up to date"
  exit 0
fi
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$req"
echo "$want" > "$stamp"
"$venv/bin/python" -m pip list --disable-pip-version-check 2>/dev/null \
  | grep -Ei '^(numpy|pytest|scikit.build.core) '
