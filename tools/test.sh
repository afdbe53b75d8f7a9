#!/usr/bin/env bash
# Sets up, builds and runs Terrace's whole test suite (this is the README's test command; CI runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j2
# ONNX 1.18's node tests (opsets to 23) where PyPI can be reached; their ctests skip without them.
bash tools/fetch_onnx_tests.sh >/dev/null || echo "test: ONNX 1.18's node tests could not be fetched; their ctests will be skipped"
status=0
ctest --test-dir build --output-on-failure -j2 --timeout 900 || status=$?
# A CI log keeps its head and tail: repeat the fuzzer's finding (its report and input) last.
if [ $status -ne 0 ] && [ -f build-fuzz/last-finding.txt ]; then
  echo "test: the fuzz ctest's finding, repeated from build-fuzz/last-finding.txt:"
  cat build-fuzz/last-finding.txt
fi
exit $status
