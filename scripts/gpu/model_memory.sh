#!/usr/bin/env bash
# The whole-model memory check on a GPU (layers/model_memory.h), in one device run.
#   scripts/gpu/model_memory.sh BIN_DIR CIFAR10_DIR
# BIN_DIR holds the built `minidl`. Prints the GPU's free memory and the host's MemAvailable, then
# trains quick_cpu's model with Linear layers at the 2^31-element limit (8.6 GB each) added, as
# many as make the parameters exceed the GPU's free memory while building them still fits the
# host's, and expects "... of device memory, X GB available" within 60 s; then one step of the
# plain config on cuda must pass the check. Exits non-zero when either expectation fails.
set -uo pipefail
bin=${1:?usage: model_memory.sh BIN_DIR CIFAR10_DIR}
data=${2:?usage: model_memory.sh BIN_DIR CIFAR10_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/minidl_model_memory.XXXXXX)
trap 'rm -rf "$work"' EXIT
small=(--config "$root/configs/quick_cpu.json" --device cuda --set "data.dir=$data" --set data.train_limit=512
  --set epochs=1 --set output.progress=false)
gpu_free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1)  # MiB
host_kb=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
layer=$((65536 * 32768 * 4 + 32768 * 4))
n=$(python3 -c "import math; print(math.floor($gpu_free * 2**20 / $layer) + 1)")
echo "GPU free $((gpu_free / 1024)) GiB, host MemAvailable $((host_kb / 1048576)) GiB: $n Linear layers of 8.6 GB"
if [ $((n * layer + 2 * 65536 * 32768 * 4)) -ge $((host_kb * 1024)) ]; then
  echo "skipped: building $n such layers does not fit the host either (the host check would answer first)"
  exit 0
fi
linears=$(python3 -c "import json; print(json.dumps({'type': 'Sequential', 'layers': [{'type': 'Linear', 'in_features': 65536, 'out_features': 32768}] * $n}))")
start=$(date +%s)
timeout 120 "$bin/minidl" train "${small[@]}" --set "model.layers.0=$linears" --output "$work/huge" 2>"$work/err"
rc=$?
echo "exit $rc after $(( $(date +%s) - start )) s: $(cat "$work/err")"
status=0
grep -q "of device memory, .* GB available" "$work/err" || { echo "FAIL: no device-memory refusal"; status=1; }
[ -e "$work/huge" ] && { echo "FAIL: the run folder was created"; status=1; }
"$bin/minidl" train "${small[@]}" --max-steps 1 --output "$work/ok" >"$work/out" 2>&1 ||
  { echo "FAIL: the plain config on cuda: $(tail -2 "$work/out")"; status=1; }
[ $status -eq 0 ] && echo "model_memory: passed"
exit $status
