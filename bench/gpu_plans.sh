#!/usr/bin/env bash
# Call plans on the GPU host: tier 2's tests, then the zoo checked on --tier gpu with whole plans
# (one CUDA graph a call), then steady-state calls with plans off, step by step and whole,
# interleaved by round. Results under $OUT. Bundle as bench/gpu_tier2.sh says (terrace, test_gpu,
# test_gpu_kernels, libterrace_clang_jit.so), then in a device call (carry .gpu):
#   bash bench/gpu_plans.sh [tests] [runs] [hot] [bench]   # default: tests runs bench
set -uo pipefail
parts=${*:-tests runs bench}
out=${OUT:-/tmp/gpu-plans}; mkdir -p "$out"
. "$(dirname "$0")/gpu_common.sh"  # /tmp/terrace, $models exported to /tmp/m, io
for part in $parts; do case "$part" in
tests) gpu_tests ;;
runs)
  wait
  for m in $models; do
    d=/tmp/m/$m; read -r in on < <(io $d)
    TERRACE_LOG=promotions timeout 150 /tmp/terrace run $d --tier gpu --warm --repeat 30 \
      --input $in=$d/test_data_set_0/input_0.pb --expect $on=$d/test_data_set_0/output_0.pb \
      --json "$out/run_$m.json" > "$out/run_$m.txt" 2>&1
    echo "== $m rc=$?"; grep -E "call plan|&&&&" "$out/run_$m.txt" | cut -c1-300 | head -6
    python3 - "$out/run_$m.json" <<'PY'
import json, sys, collections
j = json.load(open(sys.argv[1])); r = j.get("report", j)
last = r["calls"][-30:]
print("  last 30 calls:", dict(collections.Counter("+".join(c["tiers"]) for c in last)),
      "median ms", sorted(c["ms"] for c in last)[15], "plans", [(p["signature"], p["calls"], p["whole_calls"], p["whole"][:90]) for p in r.get("plans", [])])
PY
  done
  (cd "$out" && tar czf runs.tgz run_*.txt run_*.json 2>/dev/null; rm -f run_*.txt run_*.json) ;;
hot)  # each region's device time (TERRACE_DEVICE_TIMING: events around every region, step by step)
  wait
  for m in ${HOT_MODELS:-gpt2 bert resnet50}; do
    d=/tmp/m/$m; read -r in on < <(io $d)
    TERRACE_DEVICE_TIMING=1 TERRACE_CALL_PLANS=steps timeout 150 /tmp/terrace run $d --tier gpu --warm --repeat 20 \
      --input $in=$d/test_data_set_0/input_0.pb --json /tmp/hot_$m.json > "$out/hot_$m.txt" 2>&1
    python3 - /tmp/hot_$m.json "$m" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); r = r.get("report", r)
regs = [x for x in r["regions"] if x.get("device_ms")]
print(sys.argv[2], "regions timed", len(regs), "sum of device ms %.3f" % sum(x["device_ms"] for x in regs))
by_ops = {}
for x in regs:
    k = x["ops"][:70]; by_ops.setdefault(k, []).append(x["device_ms"])
for k, v in sorted(by_ops.items(), key=lambda kv: -sum(kv[1]))[:10]:
    print("  %7.3f ms in %3d regions (%.4f each): %s" % (sum(v), len(v), sum(v) / len(v), k))
PY
  done ;;
bench)
  wait
  for round in ${ROUNDS:-1 2}; do
    for m in $models; do
      d=/tmp/m/$m; read -r in on < <(io $d)
      line="$m round $round:"
      for mode in off steps whole; do
        r=$(TERRACE_CALL_PLANS=$mode timeout 100 /tmp/terrace bench $d --tier gpu --steady-calls 300 --quiet \
              --input $in=$d/test_data_set_0/input_0.pb --expect $on=$d/test_data_set_0/output_0.pb 2>&1)
        line="$line $mode $(echo "$r" | grep -oE 'median [0-9.]+ ms' | head -1)$(echo "$r" | grep -q 'PASSED' || echo ' NOT-PASSED')"
      done
      echo "$line"
    done
  done ;;
esac; done
