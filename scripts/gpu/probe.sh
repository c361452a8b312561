#!/usr/bin/env bash
# The checks of docs/reliability.md that touch device tensors, on a GPU, in one device run: the
# [checkpoint] and [export] tests (the writer's snapshot of CUDA tensors with the names bound into
# its CRC; export's checks of model.safetensors and config.json); a ResNet-9 run on cuda stopped,
# resumed (the training data's CRC-32 recorded and compared) and exported from (the weights'
# CRCs checked with --logits on cuda); export --config of a model larger than the GPU refused at
# once (the builders' device check); with 2 GPUs, a 2-rank NCCL run whose ranks compare their
# weights (copied from the device) before the first step, and its resume.
#   scripts/gpu/probe.sh BIN_DIR OUT_DIR     (BIN_DIR: minidl and minidl_tests built here)
# The data is $CIFAR10_DIR, else decoded into OUT_DIR/cifar10 (scripts/gpu/run_stage.sh). Exits 1
# when a stage fails.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:?usage: probe.sh BIN_DIR OUT_DIR}
out=${2:?usage: probe.sh BIN_DIR OUT_DIR}
source "$root/scripts/gpu/run_stage.sh"
gpu_setup "$out"
run timeout 300 "$bin/minidl_tests" "[checkpoint],[export],[model_memory]"
r9=(--config "$root/configs/resnet9_bf16.json" --device cuda --set "data.dir=$CIFAR10_DIR" --set epochs=2
    --set output.progress=false)
run timeout 200 "$bin/minidl" train "${r9[@]}" --max-steps 120 --output "$out/r9"
run timeout 200 "$bin/minidl" train --resume "$out/r9"
run timeout 200 "$bin/minidl" export --run "$out/r9" --onnx "$out/r9.onnx" --logits "$out/r9_logits.safetensors" \
  --limit 1000 --device cuda
gpu_free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1)  # MiB
n=$(python3 -c "print(int($gpu_free * 2**20 / (32768 * 32768 * 4)) + 2)")
python3 - "$root/configs/quick_cpu.json" "$out/huge.json" "$n" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["model"]["layers"] = [{"type": "Linear", "in_features": 32768, "out_features": 32768}] * int(sys.argv[3])
c["device"] = "cuda"
json.dump(c, open(sys.argv[2], "w"))
PY
refused() {
  timeout 60 "$bin/minidl" export --config "$out/huge.json" --onnx "$out/huge.onnx" 2>"$out/huge.err" && return 1
  grep -q "the model needs about .* of \(host\|device\) memory" "$out/huge.err" && [ ! -e "$out/huge.onnx" ]
}
run refused
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ] && command -v mpirun >/dev/null; then
  mpi=(mpirun --allow-run-as-root -np 2)
  run timeout 200 "${mpi[@]}" "$bin/minidl" train "${r9[@]}" --max-steps 60 --output "$out/r9_ranks"
  run timeout 200 "${mpi[@]}" "$bin/minidl" train --resume "$out/r9_ranks" --max-steps 120
else
  echo "== one GPU (or no mpirun): the 2-rank NCCL stage is skipped"
fi
gpu_finish probe
