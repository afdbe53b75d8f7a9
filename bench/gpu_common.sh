# Sourced by bench/gpu_plans.sh and bench/gpu_attention.sh on the GPU host, after they set $out:
# /tmp/terrace runs the bundled terrace (.gpu/run), the zoo ($MODELS) is exported to /tmp/m in the
# background (`wait` for it), and `io DIR` prints a model's first input and output names.
root=$(pwd)
printf '#!/usr/bin/env bash\nexec %q/.gpu/run terrace "$@"\n' "$root" > /tmp/terrace && chmod +x /tmp/terrace
export PYTHONUNBUFFERED=1
models=${MODELS:-mlp resnet50 mobilenetv2 bert gpt2}
[ -f /tmp/m/gpt2/model.onnx ] || python3 tools/make_models.py --out /tmp/m $models > "$out/export.txt" 2>&1 &
io() {
  python3 -c "import onnx;g=onnx.load('$1/model.onnx').graph;print(g.input[0].name, g.output[0].name)"
}
# Tier 2's test binaries (bundled as bench/gpu_tier2.sh says), their outputs under $out; `gpu_tests
# PATTERN` also shows the lines matching PATTERN.
gpu_tests() {
  timeout 300 .gpu/run test_gpu > "$out/test_gpu.txt" 2>&1; echo "test_gpu rc=$?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]${1:+|$1}" "$out/test_gpu.txt" | head -20
  timeout 120 .gpu/run test_gpu_kernels > "$out/test_gpu_kernels.txt" 2>&1; echo "test_gpu_kernels rc=$?"
  grep -E "^\[  (PASSED|FAILED) |FAILED  \]" "$out/test_gpu_kernels.txt" | head -10
}
