#!/usr/bin/env bash
# Sets up, builds and runs the default model (MobileNetV2 from the zoo) through Terrace, with its per-call
# report: the first calls run on the interpreter, then its regions on tier 1 (convolutions and matrix
# products through oneDNN, elementwise stretches as fused kernels through Clang and LLVM); `terrace
# explain` lists the graph breaks with the reason tier 1 gives for each.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j2 --target terrace
[ -f models/mobilenetv2/model.onnx ] || /usr/bin/python3 tools/make_models.py --out models mobilenetv2
build/tools/terrace run models/mobilenetv2/model.onnx --input image=models/mobilenetv2/test_data_set_0/input_0.pb \
  --expect output=models/mobilenetv2/test_data_set_0/output_0.pb --repeat 10 --json build/demo_run.json
echo "demo: per-call report written to build/demo_run.json; graph breaks: build/tools/terrace explain models/mobilenetv2"
