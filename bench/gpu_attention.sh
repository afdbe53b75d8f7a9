#!/usr/bin/env bash
# Fused attention on the GPU host: tier 2's tests, `terrace validate --tier gpu` on the zoo, BERT's
# and GPT-2's calls with attention fused and not (TERRACE_GPU_ATTENTION, interleaved by round), and
# compare.py against torch.compile's CUDA-graph mode. Results under $OUT. Bundle as
# bench/gpu_tier2.sh says (terrace, test_gpu, test_gpu_kernels, libterrace_clang_jit.so), then in
# a device call (carry .gpu):
#   bash bench/gpu_attention.sh [tests] [validate] [ab] [compare]   # default: all four
#   bash bench/gpu_attention.sh before-after   # with an earlier build bundled as terrace_old
#   PLANS=steps bash bench/gpu_attention.sh before-after   # call plans run step by step (no CUDA graph)
set -uo pipefail
parts=${*:-tests validate ab compare}
out=${OUT:-/tmp/gpu-attention}; mkdir -p "$out"
. "$(dirname "$0")/gpu_common.sh"  # /tmp/terrace, $models exported to /tmp/m, io
IO=${IO---device-io}  # the A/B's calls as compare.py's: inputs and outputs on the device (IO= for host copies)
# A bench run's output as one cell: the first match of pattern $2, and NOT-PASSED when its check failed.
summary() { echo "$(echo "$1" | grep -oE "$2" | head -1)$(echo "$1" | grep -q 'PASSED' || echo ' NOT-PASSED')"; }
for part in $parts; do case "$part" in
tests)
  timeout 300 .gpu/run test_gpu > "$out/test_gpu.txt" 2>&1; echo "test_gpu rc=$?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" "$out/test_gpu.txt" | head -20
  grep -A12 "GpuAttention.every_form" "$out/test_gpu.txt" | grep -E "Failure|OK|FAILED|error" | head -12
  timeout 120 .gpu/run test_gpu_kernels > "$out/test_gpu_kernels.txt" 2>&1; echo "test_gpu_kernels rc=$?"
  grep -E "^\[  (PASSED|FAILED) |FAILED  \]" "$out/test_gpu_kernels.txt" | head -10 ;;
validate)
  wait
  for m in $models; do
    d=/tmp/m/$m; read -r in on < <(io $d)
    timeout 200 /tmp/terrace validate $d/model.onnx --tier gpu --input $in=$d/test_data_set_0/input_0.pb \
      > "$out/validate_$m.txt" 2>&1
    echo "== validate $m rc=$?"; grep -E "^tier|passed$|failed|&&&&" "$out/validate_$m.txt" | cut -c1-240 | head -5
  done ;;
ab)  # the same bench with attention fused and not, interleaved
  wait
  for round in ${ROUNDS:-1 2}; do
    for m in bert gpt2; do
      d=/tmp/m/$m; read -r in on < <(io $d)
      line="$m round $round:"
      for fuse in 0 1; do
        r=$(TERRACE_GPU_ATTENTION=$fuse timeout 120 /tmp/terrace bench $d --tier gpu --steady-calls 300 --quiet $IO \
              --input $in=$d/test_data_set_0/input_0.pb --expect $on=$d/test_data_set_0/output_0.pb \
              --json "$out/ab_${m}_${fuse}_$round.json" 2>&1)
        line="$line attention=$fuse $(summary "$r" 'p50 [0-9.]+ ms, p90 [0-9.]+ ms')"
      done
      echo "$line"
    done
  done
  python3 - "$out" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/ab_*_1_1.json")):
    r = json.load(open(f)); r = r.get("report", r)
    att = [x for x in r.get("regions", []) if x.get("ops") == "Attention"]
    print(f.split("/")[-1], "regions", len(r.get("regions", [])), "attention regions", len(att),
          "tiers", sorted(set(str(x.get("tier")) for x in att)), "validation", sorted(set(x.get("validation") for x in att)),
          "plans", [(p.get("calls"), p.get("whole_calls"), str(p.get("whole"))[:60]) for p in r.get("plans", [])][:2])
PY
  (cd "$out" && tar czf ab.tgz ab_*.json 2>/dev/null; rm -f ab_*.json) ;;
before-after)  # tier 2 at an earlier commit (bundled as terrace_old) and now, host copies in both, interleaved
  wait
  printf '#!/usr/bin/env bash\nexec %q/.gpu/run terrace_old "$@"\n' "$root" > /tmp/terrace_old && chmod +x /tmp/terrace_old
  for round in ${ROUNDS:-1 2}; do
    for m in $models; do
      d=/tmp/m/$m; read -r in on < <(io $d)
      line="$m round $round:"
      for t in /tmp/terrace_old /tmp/terrace; do
        r=$(TERRACE_CALL_PLANS=${PLANS:-whole} timeout 120 $t bench $d --tier gpu --steady-calls 200 --quiet \
              --input $in=$d/test_data_set_0/input_0.pb --expect $on=$d/test_data_set_0/output_0.pb \
              --json "$out/ba_${m}_$(basename $t)_${PLANS:-whole}_$round.json" 2>&1)
        line="$line $(basename $t) $(summary "$r" 'p50 [0-9.]+ ms')"
      done
      echo "$line"
    done
  done
  python3 - "$out" "${PLANS:-whole}" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(f"{sys.argv[1]}/ba_*_terrace_{sys.argv[2]}_1.json")):
    r = json.load(open(f)); r = r.get("report", r)
    print(f.split("/")[-1], [(p.get("calls"), p.get("whole_calls"), p.get("left"), p.get("memory")) for p in r.get("plans", [])][:2])
PY
  (cd "$out" && tar czf ba_${PLANS:-whole}.tgz ba_*.json 2>/dev/null; rm -f ba_*.json) ;;
compare)
  wait
  timeout 420 python3 bench/compare.py --models ${CMP_MODELS:-bert,gpt2} --calls 50 --warmup 10 --device cuda \
    --tiers gpu --peers torch.compile-reduce-overhead --terrace /tmp/terrace --models-dir /tmp/m --out "$out/cmp" 2>&1 |
    grep -v '^compare: ' | grep '^|'
  (cd "$out" && tar czf compare.tgz cmp 2>/dev/null && rm -rf cmp) ;;
esac; done
