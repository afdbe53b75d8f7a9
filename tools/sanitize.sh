#!/usr/bin/env bash
# Builds Terrace with a sanitizer in its own directory and runs the GoogleTest suites under it.
#   tools/sanitize.sh thread     # ThreadSanitizer: build-tsan/
#   tools/sanitize.sh address    # AddressSanitizer + UBSan + LeakSanitizer: build-asan/
# Extra arguments go to ctest (e.g. -R Tiering). The command-line suites (conformance, zoo, bench)
# are left out: they run the same code as the GoogleTest suites, for minutes, through the CLI.
# Libraries built without the sanitizer (OpenMP's libgomp, TBB, oneDNN, LLVM) synchronise in ways
# ThreadSanitizer cannot see; tools/tsan.supp names them, so a report is one in Terrace's code.
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
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTERRACE_SANITIZE="$kind"
cmake --build "$dir" -j2
# allocator_may_return_null: Terrace answers an allocation it cannot make with OutOfMemory (tests
# ask for terabytes on purpose); the sanitizers would otherwise abort on it.
export TSAN_OPTIONS="suppressions=$PWD/tools/tsan.supp halt_on_error=1 second_deadlock_stack=1 history_size=4 allocator_may_return_null=1"
# OpenMP's libgomp is not instrumented: its barriers are invisible to ThreadSanitizer, which then
# reports every parallel loop's hand-over as a race. Under TSan the interpreter runs on one OpenMP
# thread (tests that set a thread count still fork); Terrace's own threads (concurrent run()
# calls, compile and re-check jobs, sessions) are what it checks.
# The tests that compare thread counts set several OpenMP threads themselves: left out under TSan.
skip='^(conformance|zoo|bench|repro|dnnl_ops_on|library_regions_on|fuzz)'
if [ "$kind" = thread ]; then
  export OMP_NUM_THREADS=1
  skip="$skip|thread_count|ThreadCount"
fi
export ASAN_OPTIONS="detect_leaks=1 abort_on_error=1 allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1 halt_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/tools/lsan.supp"
export TERRACE_CACHE_DIR="$PWD/$dir/cache"
ctest --test-dir "$dir" --output-on-failure -j2 --timeout 1800 -E "$skip" "$@"
