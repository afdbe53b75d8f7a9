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
if [ ! -f "$cache/$wheel" ] || ! echo "$sha256  $cache/$wheel" | sha256sum -c --status; then
  rm -f "$cache/$wheel"
  # pip fetches the one wheel named by version, platform and ABI (the tests inside are the same
  # in every wheel of a release), without installing anything.
  if python3 -m pip --version >/dev/null 2>&1; then
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
      --platform manylinux_2_17_x86_64 --implementation cp --abi cp311 -d "$cache" "onnx==$version" >&2
  else  # no pip (a fresh Debian): the file by name from PyPI's simple index, with Python's urllib
    python3 - "$cache" "$wheel" <<'PY' >&2
import re, sys, urllib.parse, urllib.request
cache, wheel = sys.argv[1:]
index = "https://pypi.org/simple/onnx/"
with urllib.request.urlopen(index, timeout=60) as r:
    page = r.read().decode()
urls = [u.split("#")[0] for u in re.findall(r'href="([^"]+)"', page) if u.split("#")[0].endswith("/" + wheel)]
if not urls:
    sys.exit(f"fetch_onnx_tests: PyPI lists no {wheel}")
urllib.request.urlretrieve(urllib.parse.urljoin(index, urls[0]), f"{cache}/{wheel}")
PY
  fi
fi
echo "$sha256  $cache/$wheel" | sha256sum -c --status || {
  echo "fetch_onnx_tests: $cache/$wheel does not have the pinned SHA-256 $sha256" >&2
  exit 1
}
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
