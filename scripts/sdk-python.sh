#!/usr/bin/env bash
# Builds the Python SDK's wheel (sdk/python) into OUT (default dist/, which
# git ignores), offline and without writing into the checkout: setuptools
# writes build/ and *.egg-info next to the sources it builds, so it builds a
# copy in a temporary directory. It needs only what Debian 12 and Ubuntu
# 24.04 package: python3-pip, python3-setuptools and python3-wheel
# (setuptools before 70.1 builds wheels through the wheel package).
#
#   scripts/sdk-python.sh [OUT]     prints the wheel's path
#
# PYTHON picks the interpreter (default /usr/bin/python3, the distribution's,
# where those packages are; else python3).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
py=${PYTHON:-}
if [[ -z $py ]]; then
  if [[ -x /usr/bin/python3 ]]; then py=/usr/bin/python3; else py=python3; fi
fi
if ! "$py" -c 'import setuptools, wheel' 2>/dev/null || ! "$py" -m pip --version >/dev/null 2>&1; then
  echo "sdk-python.sh: $py needs pip, setuptools and wheel to build the wheel offline" \
       "(apt-get install python3-pip python3-setuptools python3-wheel)" >&2
  exit 1
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The package's own files, not what a run left beside them.
mkdir "$tmp/python"
tar -C sdk/python --exclude=__pycache__ --exclude=build --exclude='*.egg-info' \
    --exclude=.pytest_cache --exclude=.mypy_cache -cf - . | tar -C "$tmp/python" -xf -
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' sdk/python/pyproject.toml)
rm -f "$out/agentbox-$version-py3-none-any.whl"
PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1 "$py" -m pip wheel --quiet \
  --no-build-isolation --no-deps --no-index --no-cache-dir -w "$out" "$tmp/python" >&2
whl="$out/agentbox-$version-py3-none-any.whl"
[[ -f $whl ]] || { echo "sdk-python.sh: pip made no $whl" >&2; exit 1; }
echo "$whl"
