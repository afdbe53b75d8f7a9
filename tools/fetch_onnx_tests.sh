#!/usr/bin/env bash
# Downloads ONNX 1.18.0's node tests (onnx/backend/test/data/node: 1,450 tests, opsets up to 23)
# from the pinned `onnx` wheel on PyPI, checks the wheel's SHA-256 and extracts the tests only.
# Data for `terrace conformance`, never a build dependency:
#   bash tools/fetch_onnx_tests.sh [CACHE_DIR]    # default ~/.cache/terrace/onnx-tests
#   build/tools/terrace conformance CACHE_DIR/onnx-1.18.0/node --tier interp \
#       --expected tests/conformance_expected_onnx118.txt
# Prints the folder of the node tests. Running it again reuses what is there.
set -euo pipefail
cache="${1:-${HOME}/.cache/terrace/onnx-tests}"
version=1.18.0
wheel=onnx-1.18.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
sha256=6acafb3823238bbe8f4340c7ac32fb218689442e074d797bee1c5c9a02fdae75
dest="$cache/onnx-$version"
if [ -f "$dest/node/.complete" ]; then
  echo "$dest/node"
  exit 0
fi
mkdir -p "$cache"
bash "$(dirname "$0")/fetch_wheel.sh" "$cache" "$wheel" "$sha256" >/dev/null
tmp="$(mktemp -d "$cache/extract.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
python3 - "$cache/$wheel" "$tmp" <<'PY'
import sys, zipfile
prefix = "onnx/backend/test/data/node/"
with zipfile.ZipFile(sys.argv[1]) as z:
    names = [n for n in z.namelist() if n.startswith(prefix) and not n.endswith("/")]
    for n in names:
        if ".." in n.split("/"):
            sys.exit("fetch_onnx_tests: unsafe path in the wheel: " + n)
    z.extractall(sys.argv[2], names)
PY
rm -rf "$dest"
mkdir -p "$dest"
mv "$tmp/onnx/backend/test/data/node" "$dest/node"
count=$(find "$dest/node" -mindepth 1 -maxdepth 1 -type d | wc -l)
touch "$dest/node/.complete"
echo "fetch_onnx_tests: $count node tests in $dest/node" >&2
echo "$dest/node"
