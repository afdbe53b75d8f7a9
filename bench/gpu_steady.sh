#!/usr/bin/env bash
# Time to steady state on tier 2 (issue 34 point 8): each zoo model benched from a cold start twice
# with one cache folder, first empty (NVRTC compiles, cuDNN timed) then warm (cubins and tuning
# records from the first run), and with TERRACE_CUDNN_TUNE=0 for the tuner's share; plus the GPU
# tests. Results under $OUT. Bundle terrace, test_gpu, test_gpu_kernels and libterrace_clang_jit.so
# as bench/gpu_tier2.sh says, then in a device call (carry .gpu):
#   bash bench/gpu_steady.sh [tests] [steady]    # default: both
#   RUNS="cold warm ro-cold ro-warm" bash bench/gpu_steady.sh steady   # ro: --mode reduce-overhead
set -uo pipefail
parts=${*:-tests steady}
out=${OUT:-/tmp/gpu-steady}; mkdir -p "$out"
. "$(dirname "$0")/gpu_common.sh"  # /tmp/terrace, $models exported to /tmp/m, io, gpu_tests
# One bench JSON as a line: time to steady (ms, call) and its parts, steady p50, the check.
line() {
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); t = r["time_to_steady"]
ok = all(c["equal"] for c in r["checks"])
tiers = sorted({x["tier"] for x in r["report"]["regions"]})
print(f"steady {'at' if t['reached'] else 'NOT reached by'} {t['ms']:.0f} ms (call {t['call']}): compiles {t['compile_ms']:.0f}, "
      f"tuning {t['tune_ms']:.0f}, validation {t['validate_ms']:.0f}, calls {t['calls_ms']:.0f} ms; "
      f"load {r['load_ms']:.0f} ms; p50 {r['steady']['p50_ms']:.3f} ms; regions on {tiers}; checks {'pass' if ok else 'FAIL'}")
PY
}
for part in $parts; do case "$part" in
tests) gpu_tests "CudnnTuning|CudaGraph" ;;
steady)
  wait
  for m in $models; do
    d=/tmp/m/$m; read -r in on < <(io $d); cache=/tmp/cache_$m; rm -rf "$cache"
    for run in ${RUNS:-cold warm untuned}; do
      env=(TERRACE_CACHE_DIR="$cache"); mode=default
      [ "$run" = untuned ] && { rm -rf "$cache"; env+=(TERRACE_CUDNN_TUNE=0); }
      [ "$run" = ro-cold ] && { rm -rf "$cache"; mode=reduce-overhead; }
      [ "$run" = ro-warm ] && mode=reduce-overhead
      env "${env[@]}" timeout 150 /tmp/terrace bench "$d" --tier gpu --mode $mode --calls 20 --steady-calls 50 --quiet \
        --input "$in=$d/test_data_set_0/input_0.pb" --expect "$on=$d/test_data_set_0/output_0.pb" \
        --json "$out/steady_${m}_$run.json" > "$out/steady_${m}_$run.txt" 2>&1
      echo "$m $run rc=$?: $(line "$out/steady_${m}_$run.json" 2>&1 | tail -1)"
    done
  done
  (cd "$out" && tar czf steady.tgz steady_*.json steady_*.txt && rm -f steady_*.json steady_*.txt) ;;
esac; done
