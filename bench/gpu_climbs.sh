#!/usr/bin/env bash
# Climbs judged by time on the GPU host (tiers/climb_judge.h): small real models that ran slower on
# tier 2 than on tier 1, with TERRACE_JUDGE_CLIMBS on and off, and the zoo (which should stay on
# tier 2). Bundle terrace as bench/gpu_tier2.sh says, copy tools/fetch_real_models.sh's folders
# under .gpu/models, then in a device call (carry .gpu):
#   bash bench/gpu_climbs.sh            # REAL="magika ..." and MODELS="mlp ..." choose the models
#   ROUNDS=400 JUDGES=1 ZOO=0 bash bench/gpu_climbs.sh   # longer runs, judging on only, no zoo
set -uo pipefail
out=${OUT:-/tmp/gpu-climbs}; mkdir -p "$out"
MODELS=${MODELS:-mlp mobilenetv2 bert}
. "$(dirname "$0")/gpu_common.sh"  # /tmp/terrace, the zoo exported to /tmp/m, io
# One bench run's JSON as a line: the last half of its rounds' medians (or its steady p50), whether
# every call matched, the tiers its regions ended on, and what judging said.
summary() {
  python3 - "$1" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1])); rep = r.get("report", r)
rounds = r.get("rounds") or []
late = [x["median_ms"] for x in rounds[len(rounds) // 2:]]
ms = statistics.median(late) if late else r["steady"]["p50_ms"]
tiers = {}
for x in rep["regions"]:
    tiers[x["tier"]] = tiers.get(x["tier"], 0) + 1
match = all(x["all_match"] for x in rounds) if rounds else "n/a"
judged = sorted({p.get("judged", "")[:120] for p in rep["plans"]} - {""})
back = sum("ran the calls of" in x.get("climb", "") for x in rep["regions"])
print(f"{ms:.4g} ms; all match {match}; regions by tier {tiers}; {back} kept below; judged {judged}")
PY
}
for m in ${REAL:-magika silero_vad_v6_batch oww_embedding ppocr_cls silero_vad}; do
  d=.gpu/models/$m
  [ -f "$d/model.onnx" ] || { echo "$m: not bundled"; continue; }
  for judge in ${JUDGES:-1 0}; do
    TERRACE_JUDGE_CLIMBS=$judge timeout 150 /tmp/terrace bench "$d" --tier gpu --input-sets "$d" --rounds ${ROUNDS:-100} \
      --quiet --json "$out/${m}_$judge.json" > "$out/${m}_$judge.txt" 2>&1
    echo "$m judge=$judge rc=$?: $(summary "$out/${m}_$judge.json" 2>&1 | tail -1)"
  done
done
wait
[ "${ZOO:-1}" = 0 ] && models=
for m in $models; do
  d=/tmp/m/$m; read -r in on < <(io "$d")
  timeout 150 /tmp/terrace bench "$d" --tier gpu --steady-calls 200 --quiet --input "$in=$d/test_data_set_0/input_0.pb" \
    --expect "$on=$d/test_data_set_0/output_0.pb" --json "$out/zoo_$m.json" > "$out/zoo_$m.txt" 2>&1
  echo "$m rc=$? $(grep -c PASSED "$out/zoo_$m.txt") passed: $(summary "$out/zoo_$m.json" 2>&1 | tail -1)"
done
(cd "$out" && tar czf climbs.tgz ./*.json ./*.txt && rm -f ./*.json ./*.txt)
