#!/usr/bin/env bash
# Tier 2's checks and measurements on the GPU host (the `device` tool's H100), results under $OUT.
# Build here, then bundle and run there (one call per PART, each within the tool's 10 minutes):
#   ../shared/tools/device-bundle .gpu build/tools/terrace build/lib/terrace/libterrace_clang_jit.so \
#       build/tests/test_gpu build/bench/ops_bench   # tier 1's Clang JIT plugin beside the programs
#   device run (carry .gpu):  bash bench/gpu_tier2.sh runs      # test_gpu; the zoo on --tier gpu, checked (NO_VALIDATE=1: no validate)
#                             bash bench/gpu_tier2.sh kernels   # ops_bench /gpu vs bench/gpu_ops.py; cuDNN algorithms
#                             bash bench/gpu_tier2.sh compare   # compare.py: tier 2 vs eager and torch.compile, batch 1
#                             bash bench/gpu_tier2.sh batch     # the same at ResNet-50 x32 and BERT 8x128
#                             bash bench/gpu_tier2.sh conformance  # ONNX 1.18's and Debian's node tests, interp vs gpu
# The conformance part needs the suites in the bundle (they are not on the GPU host):
#   mkdir -p .gpu/data && tar cJf .gpu/data/node-tests.tar.xz -C ~/.cache/terrace/onnx-tests onnx-1.18.0/node \
#       -C /usr/share/libonnx-testdata/data node
set -uo pipefail
part=${1:?usage: bench/gpu_tier2.sh runs|kernels|compare|batch|conformance}
out=${OUT:-/tmp/gpu-tier2}; mkdir -p "$out"
root=$(pwd)
printf '#!/usr/bin/env bash\nexec %q/.gpu/run terrace "$@"\n' "$root" > /tmp/terrace && chmod +x /tmp/terrace
export PYTHONUNBUFFERED=1
models="mlp resnet50 mobilenetv2 bert gpt2"
[ "$part" = conformance ] || [ -f /tmp/m/gpt2/model.onnx ] || python3 tools/make_models.py --out /tmp/m $models > "$out/export.txt" 2>&1
case "$part" in
runs)
  .gpu/run test_gpu > "$out/test_gpu.txt" 2>&1
  grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$out/test_gpu.txt" | head -20
  for m in $models; do
    d=/tmp/m/$m
    in=$(python3 -c "import onnx;print(onnx.load('$d/model.onnx').graph.input[0].name)")
    on=$(python3 -c "import onnx;print(onnx.load('$d/model.onnx').graph.output[0].name)")
    timeout 280 /tmp/terrace run $d --tier gpu --warm --repeat 30 --input $in=$d/test_data_set_0/input_0.pb \
      --expect $on=$d/test_data_set_0/output_0.pb --json "$out/run_$m.json" > "$out/run_$m.txt" 2>&1
    echo "== $m rc=$?"; grep -E "^warm-up|&&&&" "$out/run_$m.txt" | head -3
    python3 - "$out/run_$m.json" <<'PY'
import json, sys, collections
j = json.load(open(sys.argv[1])); r = j.get("report", j)
regs = r["regions"]
print("regions by tier", dict(collections.Counter(x["tier"] for x in regs)),
      "validation", dict(collections.Counter(x["validation"][:12] for x in regs)))
last = r["calls"][-30:]  # the reported calls, after --warm
print("last 30 calls: tiers", dict(collections.Counter("+".join(c["tiers"]) for c in last)),
      "transfers", dict(collections.Counter(c["transfers"] for c in last)), "median ms", sorted(c["ms"] for c in last)[15])
print("not on gpu:", [(x["id"], x["ops"][:40], x["gpu"][:150]) for x in regs if x["tier"] != "gpu"][:6])
PY
    if [ -z "${NO_VALIDATE:-}" ]; then
      timeout 200 /tmp/terrace validate $d --tier gpu --input $in=$d/test_data_set_0/input_0.pb > "$out/val_$m.txt" 2>&1
      echo "   validate rc=$? $(grep -E '^tier gpu' "$out/val_$m.txt")"  # (rc: validate's own)
    fi
  done
  (cd "$out" && tar czf runs.tgz run_*.txt run_*.json val_*.txt 2>/dev/null; rm -f run_*.txt run_*.json val_*.txt) ;;
kernels)
  # Line-buffered: a case that runs out of time still leaves the cases before it (about 50 s a case,
  # most of it the interpreter and validation on 32M elements before tier 2). min_time as a plain
  # number: Debian's benchmark 1.7 refuses "0.5s".
  timeout 300 stdbuf -oL .gpu/run ops_bench --benchmark_filter=/gpu --benchmark_min_time=0.5 > "$out/ops_gpu.txt" 2>&1
  grep -E "/gpu|error" "$out/ops_gpu.txt" | cut -c1-220
  timeout 150 python3 bench/gpu_ops.py 2>&1 | grep -v Warn | tail -8
  for algos in direct any; do
    TERRACE_CUDNN_ALGOS=$algos timeout 120 /tmp/terrace bench /tmp/m/resnet50 --tier gpu --calls 40 \
      --steady-calls 50 > "$out/r50_$algos.txt" 2>&1
    echo "resnet50, TERRACE_CUDNN_ALGOS=$algos: $(grep -E 'steady state' "$out/r50_$algos.txt")"
    grep -iE "demot|failed" "$out/r50_$algos.txt" | head -3
  done ;;
compare)
  timeout 540 python3 bench/compare.py --models ${models// /,} --calls 50 --warmup 10 --device cuda --tiers gpu \
    --peers pytorch-eager,torch.compile-default --terrace /tmp/terrace --models-dir /tmp/m --out "$out/b1" 2>&1 |
    grep -v '^compare: ' | grep '^|'
  (cd "$out" && tar czf compare.tgz b1 2>/dev/null && rm -rf b1) ;;
batch)  # a call of its own: at batch 32 ResNet-50 ran out of the compare part's time twice
  for spec in resnet50:32 bert:8; do
    timeout 270 python3 bench/compare.py --models ${spec%:*} --batch ${spec#*:} --calls 20 --warmup 5 --device cuda \
      --tiers gpu --peers pytorch-eager,torch.compile-default --terrace /tmp/terrace --models-dir /tmp/m \
      --out "$out/${spec/:/_b}" 2>&1 | grep -v '^compare: ' | grep '^|'
  done
  (cd "$out" && tar czf batch.tgz resnet50_b32 bert_b8 2>/dev/null && rm -rf resnet50_b32 bert_b8) ;;
conformance)  # every test that passes on the interpreter must pass on tier 2 (each test in its own process)
  mkdir -p /tmp/suites && tar xJf .gpu/data/node-tests.tar.xz -C /tmp/suites
  # about 2.6 s a test on tier 2 (a CUDA context, NVRTC and tier 1's compile each): ONNX 1.18's 1,450
  # tests take about 7 minutes at 16 jobs, Debian's 932 about 3; SUITES picks (default both), TIERS
  # the tiers (default "interp gpu"; "gpu" alone where the interpreter's run is made elsewhere, its
  # JSON then compared with the script's Python below).
  for suite in ${SUITES:-/tmp/suites/onnx-1.18.0/node /tmp/suites/node}; do
    tag=$(basename "$(dirname "$suite")"); [ "$tag" = suites ] && tag=debian
    for tier in ${TIERS:-interp gpu}; do
      timeout ${CONF_TIMEOUT:-540} /tmp/terrace conformance "$suite" --tier $tier --jobs 16 --timeout 120 \
        --json "$out/conf_${tag}_$tier.json" > "$out/conf_${tag}_$tier.txt" 2>&1
      echo "== $tag $tier rc=$? $(tail -1 "$out/conf_${tag}_$tier.txt")"
    done
    [ -f "$out/conf_${tag}_interp.json" ] || continue
    python3 - "$out/conf_${tag}_interp.json" "$out/conf_${tag}_gpu.json" <<'PY'
import json, sys
def load(f):
    return json.load(open(f))
i, g = load(sys.argv[1]), load(sys.argv[2])
lost = sorted(n for n, st in i["tests"].items() if st == "passed" and g["tests"].get(n) != "passed")
print("interp passes", i["passed"], "of", i["total"], "; gpu passes", g["passed"], "; ran on gpu:", g["ran_on_tier"],
      "; passing on interp but not on gpu:", len(lost))
for n in lost[:40]: print("  ", n, g["details"].get(n, {}).get("status"), str(g["details"].get(n, {}).get("message", ""))[:200])
PY
  done ;;
*) echo "bench/gpu_tier2.sh: unknown part '$part'" >&2; exit 2 ;;
esac
