#!/usr/bin/env bash
# The main job on a fresh machine: set up, build, get the data, train a config (default: the quick
# CPU config). Extra arguments go to `minidl train`.
# usage: scripts/train.sh [CONFIG] [minidl train options...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
config=${1:-$root/configs/quick_cpu.json}
shift || true
bash "$root/scripts/setup.sh" "$build"
data=$(bash "$root/scripts/data.sh" "$build")
exec "$build/minidl" train --config "$config" --set "data.dir=$data" "$@"
