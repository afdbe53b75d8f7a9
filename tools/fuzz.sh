#!/usr/bin/env bash
# Fuzzes Session (tests/fuzz/session_fuzzer.cpp): builds the libFuzzer target with clang-19, ASan
# and UBSan in build-fuzz/, replays the regression corpus (tests/fuzz/regressions/: every crash
# the fuzzer ever found), then fuzzes for SECONDS seconds from the ONNX node-test models.
#
#   tools/fuzz.sh [SECONDS] [LIBFUZZER_FLAG]...    # default 600 s; e.g. tools/fuzz.sh 60
#
# Environment: FUZZ_BUILD (build directory, default build-fuzz), FUZZ_FORK=N (N fuzzing
# processes that go on after a crash: for long background runs; default 0, one process that stops
# at the first finding), FUZZ_SEED=S (libFuzzer's -seed: the ctest fixes it so that a CI finding
# can be replayed by running the same seed here; default random). New interesting inputs accumulate in $FUZZ_BUILD/corpus; findings are
# written to $FUZZ_BUILD/artifacts/STAMP/ (minimize one with: session_fuzzer -minimize_crash=1
# -runs=10000 FILE, then add it to tests/fuzz/regressions/ and fix the bug).
# Exit status: 0 when nothing was found, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
shift || true
build=${FUZZ_BUILD:-build-fuzz}

bash tools/setup.sh
start=$(date +%s)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTERRACE_FUZZ=ON \
      -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 >/dev/null
cmake --build "$build" -j2 --target session_fuzzer
fuzzer=$build/tests/session_fuzzer
echo "fuzz: built in $(( $(date +%s) - start )) s"

# Runtime settings: an allocation over 1 GiB fails (Terrace's OutOfMemory error) instead of
# counting as the fuzzer's out-of-memory finding; UBSan stops at its first report.
export ASAN_OPTIONS=allocator_may_return_null=1:max_allocation_size_mb=1024:detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}
export TERRACE_LOG=error
unset TERRACE_DUMP_DIR TERRACE_FAULT TERRACE_MAX_TIER TERRACE_CACHE_DIR TERRACE_RECHECK
flags=(-max_len=16384 -timeout=60 -rss_limit_mb=4096 -malloc_limit_mb=2048 -print_final_stats=1)

# 1. The regressions, each once.
regressions=()
for f in tests/fuzz/regressions/*; do
  [ -f "$f" ] && [ "$(basename "$f")" != README.md ] && regressions+=("$f")
done
if [ ${#regressions[@]} -gt 0 ]; then
  echo "fuzz: replaying ${#regressions[@]} regression inputs"
  "$fuzzer" "${flags[@]}" "${regressions[@]}" >"$build/regressions.log" 2>&1 || {
    tail -n 60 "$build/regressions.log"
    echo "fuzz: a regression input fails again (log: $build/regressions.log)"
    exit 1
  }
fi

# 2. The seeds: the node-test models under their test names.
seeds=$build/seeds
if [ ! -d "$seeds" ]; then
  mkdir -p "$seeds.tmp"
  for m in /usr/share/libonnx-testdata/data/node/*/model.onnx; do
    cp "$m" "$seeds.tmp/$(basename "$(dirname "$m")").onnx"
  done
  mv "$seeds.tmp" "$seeds"
fi
mkdir -p "$build/corpus" "$build/artifacts"

# 3. Fuzz. A crash, a sanitizer report, an escaped exception or a leak fails; an input that runs
# past -timeout or over -rss_limit_mb (a model asking for a large but legal amount of work or
# memory) is reported and kept in the artifacts, and ends a single-process run early.
stamp=$(date +%Y%m%d-%H%M%S)
log=$build/fuzz-$stamp.log
artifacts=$build/artifacts/$stamp
mkdir -p "$artifacts"
rm -f "$build/last-finding.txt"
fork=()
[ "${FUZZ_FORK:-0}" -gt 0 ] && fork=(-fork="$FUZZ_FORK" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
seed=()
[ -n "${FUZZ_SEED:-}" ] && seed=(-seed="$FUZZ_SEED")
echo "fuzz: fuzzing for $secs s${FUZZ_SEED:+ from seed $FUZZ_SEED} (log: $log)"
status=0
"$fuzzer" "${flags[@]}" "${fork[@]}" "${seed[@]}" -max_total_time="$secs" -artifact_prefix="$artifacts/" \
  "$@" "$build/corpus" "$seeds" >"$log" 2>&1 || status=$?
grep -E '^(stat::|#[0-9]+ *(DONE|INITED))|==ERROR|^SUMMARY|runtime error|escaped|Slowest unit' "$log" | tail -n 20 || true
crashes=$(find "$artifacts" -name 'crash-*' -o -name 'leak-*' -o -name 'death-*' | wc -l)
others=$(find "$artifacts" -name 'timeout-*' -o -name 'oom-*' | wc -l)
slow=$(find "$artifacts" -name 'slow-unit-*' | wc -l)
echo "fuzz: $crashes crashes, $others timeouts or out-of-memory, $slow slow inputs (artifacts: $artifacts/)"
if [ "$crashes" -gt 0 ] || { [ $status -ne 0 ] && [ "$others" -eq 0 ]; }; then
  # What a CI log must hold to reproduce the finding on another machine: the report and the
  # input itself (a few KiB at most, -max_len), also kept in $build/last-finding.txt, which
  # tools/test.sh prints again at the very end of a failed run.
  {
    echo "fuzz: FOUND A CRASH (exit $status) on $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
    grep -E -A30 '==ERROR|runtime error|escaped|deadly signal' "$log" | head -n 60 || true
    for f in $(find "$artifacts" -name 'crash-*' -o -name 'leak-*' -o -name 'death-*' | head -n 3); do
      echo "fuzz: input $(basename "$f") ($(stat -c %s "$f") bytes), as base64; replay with"
      echo "fuzz:   base64 -d > X.onnx <<'END'   (the lines below)   then  $fuzzer X.onnx"
      base64 -w 100 "$f"
      echo "END"
    done
  } > "$build/last-finding.txt"
  tail -n 60 "$log"
  cat "$build/last-finding.txt"
  exit 1
fi
rm -f "$build/last-finding.txt"
echo "fuzz: no crash in $secs s"
