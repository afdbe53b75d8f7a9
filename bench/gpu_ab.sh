#!/usr/bin/env bash
# An environment variable's values A/B on tier 2, interleaved per model and round: p50 and p90 of
# steady calls (inputs and outputs on the device, as compare.py times tier 2), each run's check.
# Bundle terrace and libterrace_clang_jit.so as bench/gpu_tier2.sh says, then in a device call:
#   VAR=TERRACE_GEMM_TUNE VALUES="0 1" MODELS="bert gpt2" ROUNDS="1 2" bash bench/gpu_ab.sh
set -uo pipefail
out=${OUT:-/tmp/gpu-ab}; mkdir -p "$out"
. "$(dirname "$0")/gpu_common.sh"  # /tmp/terrace, $models exported to /tmp/m, io
wait
for round in ${ROUNDS:-1 2}; do
  for m in $models; do
    d=/tmp/m/$m; read -r in on < <(io "$d")
    line="$m round $round:"
    for value in ${VALUES:-0 1}; do
      r=$(env "$VAR=$value" timeout 150 /tmp/terrace bench "$d" --tier gpu --steady-calls ${CALLS:-300} --quiet \
            ${IO---device-io} --input "$in=$d/test_data_set_0/input_0.pb" --expect "$on=$d/test_data_set_0/output_0.pb" 2>&1)
      line="$line $VAR=$value $(echo "$r" | grep -oE 'p50 [0-9.]+ ms, p90 [0-9.]+ ms' | head -1)"
      echo "$r" | grep -q PASSED || line="$line NOT-PASSED"
    done
    echo "$line"
  done
done
