#!/usr/bin/env bash
# Installs every dependency Terrace needs on a Debian 12 machine; safe to run again.
set -euo pipefail
pkgs=(
  build-essential cmake ninja-build pkg-config
  llvm-19-dev libclang-19-dev libclang-cpp19-dev clang-19
  libfuzzer-19-dev libclang-rt-19-dev libomp-19-dev
  libtbb-dev libdnnl-dev
  libonnx-dev libprotobuf-dev protobuf-compiler libonnx-testdata
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev
  python3-torch python3-torchvision python3-onnx python3-numpy python3-matplotlib
  python3-dev pybind11-dev python3-pybind11
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The CUDA toolkit is optional: tier 2 is built where it is found (/usr/local/cuda).
