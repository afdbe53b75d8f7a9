#!/usr/bin/env bash
# Builds Terrace with a sanitizer in its own directory and runs the test suite under it.
#   tools/sanitize.sh thread     # ThreadSanitizer, clang-19 + LLVM's OpenMP + Archer: build-tsan/
#   tools/sanitize.sh address    # AddressSanitizer + UBSan + LeakSanitizer (GCC): build-asan/
# Extra arguments go to ctest (e.g. -R Tiering). Environment: OMP_NUM_THREADS (ThreadSanitizer:
# default 4, so that every OpenMP loop really hands work between threads), SANITIZE_BUILD_ONLY=1
# (build, run nothing).
#
# ThreadSanitizer and OpenMP: the build uses clang's -fopenmp, i.e. LLVM's libomp, and the run loads
# the Archer OMPT tool (OMP_TOOL_LIBRARIES=/usr/lib/llvm-19/lib/libarcher.so), which tells
# ThreadSanitizer about OpenMP's forks, joins, barriers, reductions and tasks; so the interpreter's
# parallel loops run on several threads, and the tests that compare thread counts run too.
# (GCC's libgomp is not instrumented: under it every loop's hand-over would be a report.)
# oneDNN (Debian's libdnnl, built with GCC) brings libgomp into the process beside libomp: two
# OpenMP runtimes. Its GOMP_* and omp_* calls bind to whichever the dynamic linker finds first;
# either way its threads run code ThreadSanitizer does not see (oneDNN, TBB and LLVM are not
# instrumented). tools/tsan.supp names those libraries, and nothing else, so a report is one in
# Terrace's own code.
#
# The command-line suites (zoo, bench, validate, compile, repro, readme, the ONNX conformance runs)
# run too: the terrace binary is built with the sanitizer and they run the same code through the
# CLI. Left out: the fuzz ctest (its own ASan + UBSan build, tools/fuzz.sh), the oneDNN suites
# re-run under DNNL_MAX_CPU_ISA (oneDNN's code is what changes there, and it is not instrumented)
# ONNX 1.18's conformance (1,450 models twice: hours under ThreadSanitizer on 2 cores) and the install
# test (it links the installed, sanitized libterrace.so into examples built without the sanitizer).
#
# Run 2026-11-23 (2-core VM shared with other builds; bench/RESULTS.md has the details):
# ctest on build-tsan with OMP_NUM_THREADS=4 (622 tests, 344 s) and again with OMP_NUM_THREADS=2
# (648 tests, 197 s), the CLI suites included (zoo, bench, validate, compile, repro, readme, the
# ONNX node conformance on the interpreter and tier 1). Reports: one real bug, a heap-use-after-free
# in a test (AttentionFusion, fixed); at OMP_NUM_THREADS=2 a SEGV at process exit after
# Tiering.destroying_a_session_abandons_its_queued_compiles (an abandoned compile still in LLVM's
# codegen while exit destroys LLVM's statics; 3 of 12 reruns; not fixed, see RESULTS.md), and
# Tiering.continuous_validation_rechecks_healthy_calls_within_its_budget failing on time (its
# nice-19 re-check thread starved). No report in an OpenMP loop, oneDNN or TBB.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: tools/sanitize.sh thread|address [ctest arguments]}
shift
case "$kind" in
  thread) dir=build-tsan ;;
  address) dir=build-asan ;;
  *) echo "tools/sanitize.sh: expected thread or address, not '$kind'" >&2; exit 2 ;;
esac
bash tools/setup.sh
compilers=()
[ "$kind" = thread ] && compilers=(-DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTERRACE_SANITIZE="$kind" "${compilers[@]}" "${launcher[@]}"
cmake --build "$dir" -j"${SANITIZE_JOBS:-2}"
[ "${SANITIZE_BUILD_ONLY:-0}" = 1 ] && exit 0
# allocator_may_return_null: Terrace answers an allocation it cannot make with OutOfMemory (tests
# ask for terabytes on purpose); the sanitizers would otherwise abort on it.
# Reports also go to files under $dir/sanitizer-reports/: a test that checks its output rather than its
# exit status (PASS_REGULAR_EXPRESSION) would otherwise pass over one.
reports="$PWD/$dir/sanitizer-reports"
rm -rf "$reports" && mkdir -p "$reports"
export TSAN_OPTIONS="suppressions=$PWD/tools/tsan.supp halt_on_error=1 second_deadlock_stack=1 history_size=4 allocator_may_return_null=1 log_path=$reports/tsan"
skip='^(fuzz|dnnl_ops_on|library_regions_on|conformance_onnx118|install_builds_and_runs_the_examples)'
if [ "$kind" = thread ]; then
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
  export OMP_TOOL_LIBRARIES=/usr/lib/llvm-19/lib/libarcher.so
  # Threads that sleep at once after a loop instead of spinning 200 ms: 2 cores, shared.
  export OMP_WAIT_POLICY=passive
  [ -f "$OMP_TOOL_LIBRARIES" ] || { echo "tools/sanitize.sh: $OMP_TOOL_LIBRARIES is missing (libomp-19-dev)" >&2; exit 1; }
else
  skip='^(conformance|zoo|bench|repro|dnnl_ops_on|library_regions_on|fuzz)'
fi
export ASAN_OPTIONS="detect_leaks=1 abort_on_error=1 allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1 halt_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/tools/lsan.supp"
export TERRACE_CACHE_DIR="$PWD/$dir/cache"
status=0
ctest --test-dir "$dir" --output-on-failure -j2 --timeout 1800 -E "$skip" "$@" || status=$?
if [ -n "$(ls -A "$reports")" ]; then
  head -n 60 "$reports"/*
  echo "tools/sanitize.sh: $(ls "$reports" | wc -l) sanitizer report(s) in $reports"
  exit 1
fi
exit $status
