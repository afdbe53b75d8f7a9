#!/usr/bin/env bash
# Sets up, builds and runs the default model (an MLP from the zoo) through Terrace, with its per-call report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j2 --target terrace
[ -f models/mlp/model.onnx ] || /usr/bin/python3 tools/make_models.py --out models mlp
build/tools/terrace run models/mlp/model.onnx --input x=models/mlp/test_data_set_0/input_0.pb \
  --expect output=models/mlp/test_data_set_0/output_0.pb --repeat 10 --json build/mlp_run.json
echo "demo: per-call report written to build/mlp_run.json"
