#!/usr/bin/env bash
# Makes BUILD_DIR/cifar10-jpeg-small, a class-balanced image folder (200 training and 100 test
# JPEGs per class) cut from the project's CIFAR-10 JPEG archive, for the image-folder tests and
# the CI run from a folder, and prints its path. Prints nothing (and succeeds) without the archive.
# usage: scripts/data_jpeg.sh BUILD_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: data_jpeg.sh BUILD_DIR}
archive=${CIFAR10_JPEG_TAR:-$root/../shared/data/cifar10-jpeg.tar.xz}
out=$build/cifar10-jpeg-small
[ -f "$archive" ] || exit 0
if [ ! -f "$out/.complete" ]; then
  rm -rf "$out"
  python3 "$root/scripts/cifar10_jpeg_subset.py" "$archive" "$out" 200 100 >&2
  touch "$out/.complete"
fi
echo "$out"
