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
