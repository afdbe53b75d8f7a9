#!/usr/bin/env bash
# Creates a virtual environment holding the comparison-only peers (ONNX Runtime from PyPI) beside
# the system's PyTorch, and prints the Python to run bench/compare.py with. Never part of the build:
# Terrace does not link or import anything from it.
#   bash bench/setup_peers.sh [VENV_DIR]      (default ~/.cache/terrace/peers-venv)
#   "$(bash bench/setup_peers.sh)" bench/compare.py --peers onnxruntime,pytorch-eager ...
set -euo pipefail
venv="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/terrace/peers-venv}"
ort_version="${TERRACE_ORT_VERSION:-1.23.2}"
if [ ! -x "$venv/bin/python" ]; then
  echo "setup_peers: creating $venv (with the system's site packages: PyTorch, onnx, numpy)" >&2
  dpkg-query -W -f='${Status}' python3-venv 2>/dev/null | grep -q 'ok installed' || {
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
  }
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
if ! "$venv/bin/python" -c "import onnxruntime, sys; sys.exit(onnxruntime.__version__ != '$ort_version')" 2>/dev/null; then
  echo "setup_peers: installing onnxruntime==$ort_version from PyPI" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "onnxruntime==$ort_version" >&2
fi
"$venv/bin/python" -c "import onnxruntime; print('setup_peers: onnxruntime', onnxruntime.__version__, file=__import__('sys').stderr)"
echo "$venv/bin/python"
