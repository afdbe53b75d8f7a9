#!/bin/bash
# The install as a user meets it (issue 12, point 3; a ctest): installs BUILD into a temporary
# prefix, builds tools/examples/ out of tree against it with find_package(Terrace) and with
# pkg-config, and runs each program on MODEL. Usage: test_install.sh SOURCE_DIR BUILD_DIR MODEL WORK_DIR
set -euo pipefail
src=$1 build=$2 model=$3 work=$4
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
step() { printf '== %s\n' "$*"; }

step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
for f in bin/terrace include/terrace/capi/terrace_c.h include/terrace/tiers/session.h \
         include/terrace/interp/graph_builder.h; do
  [ -e "$prefix/$f" ] || { echo "missing after install: $f"; exit 1; }
done
libdir=$(dirname "$(find "$prefix" -name 'libterrace.so' | head -n 1)")
[ -n "$libdir" ] || { echo "missing after install: libterrace.so"; exit 1; }

# Each program must print the input and output lines and the report.
check() {
  local out
  out=$("$@") || { printf '%s\n' "$out"; echo "FAILED: $*"; exit 1; }
  printf '%s\n' "$out" | head -n 12
  printf '%s\n' "$out" | grep -q "^output '.*': shape \[" || { echo "FAILED: no output shape from $1"; exit 1; }
  printf '%s\n' "$out" | grep -q "region" || { echo "FAILED: no report from $1"; exit 1; }
}

step "find_package(Terrace): cmake -S $src/tools/examples -DCMAKE_PREFIX_PATH=$prefix"
cmake -S "$src/tools/examples" -B "$work/find_package" -DCMAKE_PREFIX_PATH="$prefix" > "$work/configure.log"
cmake --build "$work/find_package" > "$work/build.log"
check "$work/find_package/run_model_c" "$model"
check "$work/find_package/run_model_cpp" "$model"

step "pkg-config --cflags --libs terrace"
export PKG_CONFIG_PATH=$libdir/pkgconfig
flags=$(pkg-config --cflags --libs terrace)
echo "$flags"
# Each installed header compiles alone against the install (a header the public ones include but
# the install left out fails here); terrace_c.h also as C99.
for h in $(cd "$prefix/include/terrace" && find . -name '*.h' | sort); do
  printf '#include "%s"\n' "${h#./}" | c++ -std=c++20 -fsyntax-only -x c++ - $flags || { echo "FAILED: $h alone"; exit 1; }
done
printf '#include "capi/terrace_c.h"\n' | cc -std=c99 -pedantic-errors -fsyntax-only -x c - $flags
echo "each installed header compiles alone"
mkdir -p "$work/pkg-config"
cc -std=c99 -Wall -pedantic-errors "$src/tools/examples/run_model.c" $flags -o "$work/pkg-config/run_model_c"
c++ -std=c++20 -Wall "$src/tools/examples/run_model.cpp" $flags -o "$work/pkg-config/run_model_cpp"
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
check "$work/pkg-config/run_model_c" "$model"
check "$work/pkg-config/run_model_cpp" "$model"
step "$prefix/bin/terrace run $model --random-inputs"
"$prefix/bin/terrace" run "$model" --random-inputs | tail -n 2

# The CLI's data files come from the prefix (share/terrace), ahead of the source tree it was
# built from: conformance names the expected-failures list it read, bench --plot draws.
for f in share/terrace/plot_bench.py share/terrace/conformance/conformance_expected.txt \
         share/terrace/conformance/conformance_expected_onnx118.txt; do
  [ -e "$prefix/$f" ] || { echo "missing after install: $f"; exit 1; }
done
relu=/usr/share/libonnx-testdata/data/node/test_relu
if [ -d "$relu" ]; then
  step "$prefix/bin/terrace conformance $relu"
  out=$("$prefix/bin/terrace" conformance "$relu" --tier interp)
  printf '%s\n' "$out" | grep "listed in $prefix/share/terrace/conformance/conformance_expected.txt" ||
    { printf '%s\n' "$out"; echo "FAILED: conformance did not read the installed list"; exit 1; }
fi
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  step "$prefix/bin/terrace bench $model --calls 3 --plot"
  "$prefix/bin/terrace" bench "$model" --calls 3 --tier cpu --plot "$work/bench.png" > "$work/bench.log"
  [ -s "$work/bench.png" ] || { cat "$work/bench.log"; echo "FAILED: no plot"; exit 1; }
  echo "bench --plot drew $work/bench.png"
fi
echo "install, find_package and pkg-config builds: all ran"
