#!/usr/bin/env bash
# ctest volume_train: a 3-D UNet trained from JSON on synthetic volumes, end to end on the CPU:
#   - `minidl summary` of configs/unet3d_cpu.json gives (N, 3, 16, 16, 16) logits, and
#     configs/unet3d.json's 4-level UNet counts its parameters;
#   - a run with eval.target_dice 0.3 lifts the test Dice from its first epoch to the target, stops
#     at the first epoch that reaches it (before the config's last) and reports the training seconds
#     it took (time_to_target_s) in the log and summary.json, the per-class Dice beside it;
#   - `minidl repro` gives the same bits twice; a run stopped part-way through an epoch and resumed
#     ends with the uninterrupted run's bits;
#   - bad input is one clear message: image keys for volumes, a side out of range, a model whose
#     output is not one logit per class and voxel, TTA on volumes, the Dice loss on images, and
#     `minidl eval` of a volume run.
#   tests/volume_train_test.sh MINIDL SOURCE_DIR
set -euo pipefail
fail() { echo "FAIL: $*"; exit 1; }
minidl=$1 src=$2 cfg=$2/configs/unet3d_cpu.json quiet=(--set output.progress=false)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$minidl" summary --config "$cfg" "${quiet[@]}" >"$work/summary"
grep -q "(4, 3, 16, 16, 16)" "$work/summary" || { cat "$work/summary"; fail "summary: no (4, 3, 16, 16, 16) logits"; }
"$minidl" summary --config "$src/configs/unet3d.json" --device cpu --batch-size 1 --set data.size=16 \
  >"$work/summary_gpu" 2>&1
grep -q "^parameters: 5,601,220 " "$work/summary_gpu" || { tail -3 "$work/summary_gpu"; fail "summary of unet3d"; }

# A short run learns to segment, and stops where it reaches the target.
"$minidl" train --config "$cfg" "${quiet[@]}" --set eval.target_dice=0.3 --output "$work/run" >"$work/run.out" 2>&1 ||
  { cat "$work/run.out"; fail "training unet3d_cpu"; }
grep -q "^target reached: test Dice [0-9.]* >= eval.target_dice 0.3 after epoch" "$work/run.out" ||
  { cat "$work/run.out"; fail "no target line"; }
grep -q "^done: test Dice [0-9.]* (16 test volumes, the final weights; voxels [0-9.]*% right), .*, time to Dice 0.3: " \
  "$work/run.out" || { cat "$work/run.out"; fail "no done line with the test Dice and the time to target"; }
python3 - "$work/run" <<'PY' || fail "metrics"
import json, sys
run = sys.argv[1]
records = [json.loads(l) for l in open(run + "/metrics.jsonl") if '"epoch"' in l]
s = json.load(open(run + "/summary.json"))
assert records and all(k in r for r in records for k in ("test_dice", "test_class_dice", "train_acc")), records
assert len(records) < 8, [r["test_dice"] for r in records]  # stopped before the config's 8 epochs
assert records[0]["test_dice"] < 0.3 <= records[-1]["test_dice"], [r["test_dice"] for r in records]
assert s["test_dice"] == records[-1]["test_dice"], (s["test_dice"], records[-1]["test_dice"])
assert set(s["test_class_dice"]) == {"background", "class 1", "class 2"}, s["test_class_dice"]
assert 0 < s["time_to_target_s"] <= s["train_seconds"] and s["target_dice"] == 0.3, s
assert "per_class_acc" not in s and "tokens_per_s" not in s
PY

# The same bits twice; a resume part-way through the epoch ends where the whole run ends.
"$minidl" repro --config "$cfg" "${quiet[@]}" --steps 3 --output "$work/repro" >"$work/repro.out" 2>&1 ||
  { cat "$work/repro.out"; fail "repro"; }
grep -q "IDENTICAL" "$work/repro.out" || { cat "$work/repro.out"; fail "repro: not identical"; }
small=(--config "$cfg" "${quiet[@]}" --set data.train_volumes=12 --set data.test_volumes=2 --set epochs=2
       --set checkpoint.every_steps=2)
"$minidl" train "${small[@]}" --output "$work/whole" >/dev/null 2>&1 || fail "the uninterrupted run"
"$minidl" train "${small[@]}" --output "$work/part" --max-steps 4 >/dev/null 2>&1 || fail "the first part"
"$minidl" train --resume "$work/part" >"$work/resume.out" 2>&1 || { cat "$work/resume.out"; fail "the resume"; }
cmp -s "$work/whole/model.safetensors" "$work/part/model.safetensors" || fail "the resumed run's weights differ"

# Bad input.
bad() {  # bad PATTERN ARGS...: minidl train ARGS exits 1 with one error matching PATTERN
  local pattern=$1 rc=0
  shift
  "$minidl" train "$@" "${quiet[@]}" --output "$work/bad" --overwrite >"$work/bad.out" 2>&1 || rc=$?
  [ "$rc" -eq 1 ] && grep -q -- "$pattern" "$work/bad.out" || { cat "$work/bad.out"; fail "no '$pattern' (exit $rc)"; }
}
bad 'data.mean: not for "format": "volumes"' --config "$cfg" --set 'data.mean=[0.5,0.5,0.5]'
bad 'data.size: expected an integer in 8..256, got 300' --config "$cfg" --set data.size=300
bad 'segmentation needs (1, 4, 16, 16, 16) logits' --config "$cfg" --set data.classes=4
bad 'eval.tta: the views of "flip" are of 2-d images' --config "$cfg" --set eval.tta=flip
rc=0; "$minidl" eval --run "$work/run" >"$work/bad.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] && grep -q "trained a segmentation of volumes (data.format \"volumes\"): its test Dice is in" "$work/bad.out" ||
  { cat "$work/bad.out"; fail "minidl eval of a volume run (exit $rc)"; }
bad 'loss.type: "dice" needs segmentation data (data.format "volumes"); this is "cifar10"' \
  --config "$src/configs/quick_cpu.json" --set loss.type=dice
echo "volume_train: passed"
