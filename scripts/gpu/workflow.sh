#!/usr/bin/env bash
# The everyday loop on the GPU machine (docs/guide.md): train, eval and predict on CUDA, and
# PyTorch's own weights for the twin of a shipped config through init_from.
#   1. configs/quick_cpu.json for one epoch on CUDA (bf16 channels_last, its "auto" here); `eval`
#      on CUDA must give the epoch's test accuracy and TTA accuracy exactly; `eval` on the CPU of
#      the same run is printed beside it (the CPU runs the run's bf16 through its own kernels);
#   2. `predict` on CUDA and on the CPU name the same top class for PNGs made here;
#   3. the PyTorch twin of quick_cpu (scripts/torch/model_from_json.py), saved with
#      safetensors.torch.save_file (BatchNorm's num_batches_tracked included), starts a run through
#      init_from: 16 tensors loaded by name, 3 counters ignored, the weights after one step at lr 0
#      equal to PyTorch's bit for bit.
#   scripts/gpu/workflow.sh BIN_DIR OUT_DIR
# BIN_DIR holds minidl built with CUDA; python3 needs torch and safetensors. Exits 1 when a stage fails.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:?usage: workflow.sh BIN_DIR OUT_DIR}
out=${2:?usage: workflow.sh BIN_DIR OUT_DIR}
source "$root/scripts/gpu/run_stage.sh"
gpu_setup "$out"
cfg=$root/configs/quick_cpu.json

run "$bin/minidl" train --config "$cfg" --device cuda --set epochs=1 --output "$out/run" --overwrite
run "$bin/minidl" eval --run "$out/run" --device cuda --output "$out/eval_cuda.json"
run "$bin/minidl" eval --run "$out/run" --device cpu --output "$out/eval_cpu.json"
run python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
last = [json.loads(l) for l in open(f"{out}/run/metrics.jsonl")][-1]
cuda, cpu = json.load(open(f"{out}/eval_cuda.json")), json.load(open(f"{out}/eval_cpu.json"))
print(f"epoch: {last['test_acc']}% / {last['test_acc_tta']}% TTA; eval cuda {cuda['accuracy']}% / "
      f"{cuda['accuracy_tta']}%; eval cpu {cpu['accuracy']}% / {cpu['accuracy_tta']}%")
assert cuda["accuracy"] == last["test_acc"] and cuda["accuracy_tta"] == last["test_acc_tta"], "eval on CUDA differs"
assert abs(cpu["accuracy"] - last["test_acc"]) < 0.5, "eval on the CPU is far from the run's"
PY

for c in red green blue; do python3 "$root/tests/png_folder.py" image "$out/$c.png" "$c" 40 30; done
predict_json() {  # DEVICE: the three images' predictions as JSON in OUT/predict_DEVICE.json (run prints around it)
  "$bin/minidl" predict --run "$out/run" --device "$1" --json "$out/red.png" "$out/green.png" "$out/blue.png" \
    >"$out/predict_$1.json"
}
run predict_json cuda
run predict_json cpu
run python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
a, b = (json.load(open(f"{out}/predict_{d}.json")) for d in ("cuda", "cpu"))
print([(x["image"].split("/")[-1], x["top"][0]["class"], round(x["top"][0]["probability"], 3)) for x in a])
assert [x["top"][0]["class"] for x in a] == [x["top"][0]["class"] for x in b], "CUDA and CPU predict differently"
PY

run python3 - "$root" "$out" <<'PY'
import json, sys
import torch
from safetensors.torch import save_file
root, out = sys.argv[1], sys.argv[2]
sys.path.insert(0, f"{root}/scripts/torch")
from model_from_json import build_model
torch.manual_seed(7)
model = build_model(json.load(open(f"{root}/configs/quick_cpu.json")))
save_file({k: v.contiguous() for k, v in model.state_dict().items()}, f"{out}/torch_quick_cpu.safetensors")
PY
run "$bin/minidl" train --config "$cfg" --device cuda --set init_from.path="$out/torch_quick_cpu.safetensors" \
  --set optimizer.lr=0 --max-steps 1 --output "$out/from_torch" --overwrite
run grep -q "init_from $out/torch_quick_cpu.safetensors: loaded 16 tensors" "$out/from_torch/log.txt"
run grep -q "3 num_batches_tracked counters" "$out/from_torch/log.txt"
run python3 - "$out" <<'PY'
import sys
from safetensors.torch import load_file
out = sys.argv[1]
torch_weights, minidl_weights = load_file(f"{out}/torch_quick_cpu.safetensors"), load_file(f"{out}/from_torch/model.safetensors")
params = [k for k in minidl_weights if not k.endswith(("running_mean", "running_var"))]
for k in params:
    assert torch_weights[k].equal(minidl_weights[k]), k
print(f"init_from: {len(params)} parameters equal to PyTorch's after a step at lr 0")
PY
gpu_finish workflow.sh
