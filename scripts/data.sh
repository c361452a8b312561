#!/usr/bin/env bash
# Prints the directory of the CIFAR-10 binaries, making it if needed, in this order:
#   1. $CIFAR10_DIR when set (data the user already has: the official cifar-10-batches-bin);
#   2. the project's bundled JPEG copy in ../shared, decoded into BUILD_DIR/cifar10;
#   3. the official archive, downloaded and checked by scripts/fetch-cifar10.sh into BUILD_DIR/cifar10.
# usage: scripts/data.sh BUILD_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: data.sh BUILD_DIR}
if [ -n "${CIFAR10_DIR:-}" ]; then echo "$CIFAR10_DIR"; exit 0; fi
shared_tool="$root/../shared/tools/prepare-cifar10.sh"
if [ -x "$shared_tool" ] || [ -f "$shared_tool" ]; then
  bash "$shared_tool" "$build/cifar10" >&2
else
  bash "$root/scripts/fetch-cifar10.sh" "$build/cifar10" >&2
fi
echo "$build/cifar10"
