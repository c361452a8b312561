#!/usr/bin/env bash
# A validation split, early stopping and the best checkpoint on the GPU, in one device run:
#   1. the [validation][cuda] tests: evaluation batches graphed and eager give the same
#      predictions, loss and confusion counts, and the confusion's diagonal is the TTA accuracy
#   2. ResNet-9 (as shipped: bf16 channels_last here) for 6 epochs with data.val_fraction 0.1,
#      checkpoint.save_best on val_acc and early_stopping (patience 2), uninterrupted; and the same
#      run stopped with --max-steps inside epoch 2 and at the end of epoch 4, then resumed: the
#      steps, weights, best.safetensors and the decisions must be identical
#   3. the per-class metrics come from the last evaluation: the done: line's test accuracy and the
#      summary's confusion diagonal agree, and the log has no second test pass
#   scripts/gpu/validation.sh BIN_DIR OUT_DIR     (BIN_DIR: minidl and minidl_tests built here)
# The data is $CIFAR10_DIR, else decoded into OUT_DIR/cifar10 (scripts/gpu/run_stage.sh). Exits 1
# when a stage fails. Expected wall time: about 2 minutes.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:?usage: validation.sh BIN_DIR OUT_DIR}
out=${2:?usage: validation.sh BIN_DIR OUT_DIR}
source "$root/scripts/gpu/run_stage.sh"
gpu_setup "$out"

run timeout 300 "$bin/minidl_tests" "[validation]"
keys=(--set epochs=6 --set data.val_fraction=0.1 --set checkpoint.save_best=true --set checkpoint.monitor=val_acc
  --set early_stopping.patience=2 --set output.progress=false)
run timeout 200 "$bin/minidl" train --config "$root/configs/resnet9.json" --device cuda "${keys[@]}" --output "$out/full"
run timeout 200 "$bin/minidl" train --config "$root/configs/resnet9.json" --device cuda "${keys[@]}" --max-steps 120 \
  --output "$out/resumed"
run timeout 200 "$bin/minidl" train --resume "$out/resumed" --max-steps 348
grep -q stopped_early "$out/resumed/summary.json" || run timeout 200 "$bin/minidl" train --resume "$out/resumed"
for f in steps.jsonl model.safetensors best.safetensors; do
  if cmp -s "$out/full/$f" "$out/resumed/$f"; then echo "resume: $f identical"
  else echo "resume: $f DIFFERENT"; echo "resume: $f differs" >> "$out/FAILED"; fi
done
python3 - "$out/full" "$out/resumed" <<'PY' || echo "summary check failed" >> "$out/FAILED"
import json, sys
a, b = (json.load(open(f"{d}/summary.json")) for d in sys.argv[1:3])
print("best:", a.get("best"), "stopped_early:", a.get("stopped_early", "no"), "splits:", a["splits"])
assert a.get("best") == b.get("best") and a.get("stopped_early") == b.get("stopped_early"), "decisions differ"
k = len(a["classes"])
right = sum(a["confusion"][i][i] for i in range(k))
total = sum(map(sum, a["confusion"]))
acc = a["test_acc_tta"] if a["class_metrics_tta"] != "none" else a["test_acc"]
assert total == a["splits"]["test"] and abs(100 * right / total - acc) < 1e-9, (right, total, acc)
print(f"per-class metrics from the last evaluation: {100 * right / total:.2f}% = the test accuracy")
PY
grep -E "^[0-9T:-]+Z (epoch|early stopping|done)" "$out/full/log.txt"
gpu_finish validation.sh
