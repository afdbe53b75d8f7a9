#!/usr/bin/env bash
# Issue 14's real exports, on the GPU host (PyTorch 2.11): the zoo exported by torch's current
# default exporter (dynamo, opset 18+) loads and runs on every tier with PyTorch's results and the
# opset-17 exports' results. Results under $OUT (default /tmp/dynamo-exports).
#   ../shared/tools/device-bundle .gpu build/tools/terrace ...;  device run (carry .gpu):
#   bash bench/dynamo_exports.sh [MODEL...]
set -uo pipefail
out=${OUT:-/tmp/dynamo-exports}; mkdir -p "$out"
root=$(pwd)
printf '#!/usr/bin/env bash\nexec %q/.gpu/run terrace "$@"\n' "$root" > /tmp/terrace && chmod +x /tmp/terrace
models=${*:-mlp resnet50 mobilenetv2 bert gpt2}
python3 -c "import torch, onnx; print('torch', torch.__version__, 'onnx', onnx.__version__)" | tee "$out/versions.txt"
python3 -c "import onnxscript; print('onnxscript', onnxscript.__version__)" 2>&1 | tail -1 | tee -a "$out/versions.txt"
[ -f /tmp/m/gpt2/model.onnx ] || python3 tools/make_models.py --out /tmp/m $models > "$out/export17.txt" 2>&1
python3 tools/make_models.py --dynamo --out /tmp/md $models > "$out/export_dynamo.txt" 2>&1 || tail -20 "$out/export_dynamo.txt"
for m in $models; do
  d=/tmp/md/$m
  [ -f $d/model.onnx ] || { echo "== $m: no dynamo export"; continue; }
  python3 - "$d/model.onnx" "/tmp/m/$m" "$d" <<'PY' | tee "$out/$m.summary.txt"
import collections, sys, onnx, onnx.numpy_helper as nh, numpy as np
m = onnx.load(sys.argv[1])
ops = collections.Counter(n.op_type for n in m.graph.node)
print("opsets", {o.domain or "ai.onnx": o.version for o in m.opset_import}, "nodes", len(m.graph.node),
      "functions", len(m.functions))
print("ops", dict(ops.most_common()))
a = nh.to_array(onnx.load_tensor(sys.argv[2] + "/test_data_set_0/input_0.pb"))
b = nh.to_array(onnx.load_tensor(sys.argv[3] + "/test_data_set_0/input_0.pb"))
ya = nh.to_array(onnx.load_tensor(sys.argv[2] + "/test_data_set_0/output_0.pb"))
yb = nh.to_array(onnx.load_tensor(sys.argv[3] + "/test_data_set_0/output_0.pb"))
print("same input as the opset-17 export:", a.shape == b.shape and bool((a == b).all()),
      "PyTorch outputs differ by", float(np.abs(ya - yb).max()) if ya.shape == yb.shape else "shape")
PY
  in=$(python3 -c "import onnx;print(onnx.load('$d/model.onnx').graph.input[0].name)")
  on=$(python3 -c "import onnx;print(onnx.load('$d/model.onnx').graph.output[0].name)")
  timeout 200 /tmp/terrace validate $d --tier all --input $in=$d/test_data_set_0/input_0.pb \
    --json "$out/$m.validate.json" > "$out/$m.validate.txt" 2>&1
  echo "== $m validate rc=$? $(tail -n 1 "$out/$m.validate.txt" | cut -c1-60)"
  grep -iE "^ *(tier|interp|cpu|gpu)\b|differ|demot|FAILED" "$out/$m.validate.txt" | head -8
  for t in interp cpu gpu; do
    # Against PyTorch's output for this input (the summary shows it equals the opset-17 export's).
    timeout 150 /tmp/terrace run $d --tier $t --repeat 40 --quiet --input $in=$d/test_data_set_0/input_0.pb \
      --expect $on=$d/test_data_set_0/output_0.pb \
      --json "$out/$m.run_$t.json" > "$out/$m.run_$t.txt" 2>&1
    echo "   run --tier $t rc=$? $(grep -E '^check' "$out/$m.run_$t.txt" | head -2 | tr '\n' ' ' | cut -c1-200)"
    echo "   $(grep -E '^tiers:' "$out/$m.run_$t.txt") $(tail -n 1 "$out/$m.run_$t.txt" | cut -c1-12)"
  done
done
