#!/usr/bin/env bash
# Sets up, builds and runs Terrace's whole test suite (this is the README's test command; CI runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j2
# ONNX 1.18's node tests (opsets to 23) where PyPI can be reached; their ctests skip without them.
bash tools/fetch_onnx_tests.sh >/dev/null || echo "test: ONNX 1.18's node tests could not be fetched; their ctests will be skipped"
ctest --test-dir build --output-on-failure -j2 --timeout 900
