#!/usr/bin/env bash
# Runs the command lines of README.md's "Using it" block as written, in order, in a scratch folder
# where build/ is this build and tools/ the source tree's tools (issue 13: every README command runs
# as written and ends as it says). Each must exit 0; run, bench and conformance must end with
# "&&&& PASSED". The "Two commands" block (demo.sh, test.sh) is left out: it installs packages and
# builds the whole tree.
#   readme_commands.sh SOURCE_DIR BINARY_DIR
set -uo pipefail
src=$1 bin=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/terrace_readme.XXXXXX")
trap 'rm -rf "$work"' EXIT
ln -s "$bin" "$work/build"
ln -s "$src/tools" "$work/tools"
export TERRACE_CACHE_DIR="$work/cache"

# The first ```sh block after "## Using it", without comments.
mapfile -t lines < <(awk '/^## Using it/{found=1} found && /^```sh/{inblock=1; next} inblock && /^```/{exit} inblock' "$src/README.md")
[ ${#lines[@]} -gt 0 ] || { echo "readme_commands: no command block found in README.md"; exit 1; }

failed=0 ran=0
cd "$work"
for line in "${lines[@]}"; do
  cmd=${line%%#*}
  [ -n "${cmd// }" ] || continue
  echo "readme_commands: \$ $cmd"
  out=$(bash -c "$cmd" 2>&1)
  rc=$?
  ran=$((ran + 1))
  last=$(printf '%s\n' "$out" | tail -n 1)
  if [ $rc -ne 0 ]; then
    printf '%s\n' "$out" | tail -n 20
    echo "readme_commands: FAILED (exit $rc): $cmd"
    failed=$((failed + 1))
  elif [[ $cmd =~ terrace\ (run|bench|conformance) ]] && [[ $last != "&&&& PASSED"* ]]; then
    printf '%s\n' "$out" | tail -n 5
    echo "readme_commands: FAILED (no &&&& PASSED line): $cmd"
    failed=$((failed + 1))
  else
    echo "readme_commands: ok: $last"
  fi
done
echo "readme_commands: $ran commands, $failed failed"
[ $failed -eq 0 ] && [ $ran -gt 0 ]
