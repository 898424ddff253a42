#!/usr/bin/env bash
# Packs what a device run needs into .devdata/bundle.tgz (one archive travels better than many files): the
# stripped binaries of build/ and a copy of ../shared/matrices. On the device:
#   tar xzf .devdata/bundle.tgz && mv matrices .devdata/ && SPCG_MATRIX_DIR=$PWD/.devdata/matrices scripts/device.sh OUT
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
mkdir -p "$tmp/build/apps" "$tmp/build/tests" .devdata
find build/apps -maxdepth 1 -type f -executable -exec cp {} "$tmp/build/apps/" \;
find build/tests -maxdepth 1 -type f -executable \( -name 'test_*' -o -name 'fake_*' \) -exec cp {} "$tmp/build/tests/" \;
strip "$tmp"/build/apps/* "$tmp"/build/tests/*
[ -d ../shared/matrices ] && cp -r ../shared/matrices "$tmp/matrices"
rm -f .devdata/bundle.tgz
tar czf .devdata/bundle.tgz -C "$tmp" .
rm -rf "$tmp"
ls -la .devdata/bundle.tgz
