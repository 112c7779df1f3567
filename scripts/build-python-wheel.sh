#!/usr/bin/env bash
# Builds the Python client's wheel (clients/python) into OUTDIR with Debian's python3, setuptools
# and wheel, offline: `pip install --no-index OUTDIR/dgpu-<version>-py3-none-any.whl` then
# installs it on a machine without a package registry. Built from a copy, so that the source
# folder stays clean.
set -euo pipefail
out=$(realpath -m "$1")
src=$(cd "$(dirname "$0")/../clients/python" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$src" "$tmp/python"
rm -rf "$tmp/python/build" "$tmp/python"/*.egg-info
find "$tmp/python" -name __pycache__ -prune -exec rm -rf {} +
mkdir -p "$out"
PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m pip wheel --quiet --no-deps --no-build-isolation \
  --no-index --wheel-dir "$out" "$tmp/python"
