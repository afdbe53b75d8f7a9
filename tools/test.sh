#!/usr/bin/env bash
# Sets up, builds and runs Terrace's whole test suite (this is the README's test command; CI runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j2
ctest --test-dir build --output-on-failure -j2 --timeout 900
