#!/usr/bin/env bash
# The PyTorch reference for ResNet-9 on the GPU machine (scripts/torch/resnet9.py): step time
# (cuDNN heuristics, then cudnn.benchmark), a torch.profiler breakdown, and a full training run
# of the config, each written as JSON into OUT_DIR, then a summary next to docs/perf/anchors.md's figures.
# usage: scripts/gpu/torch_resnet9.sh OUT_DIR [DATA_DIR] [CONFIG]
#   DATA_DIR: decoded CIFAR-10 (default: what scripts/data.sh finds or makes under build/)
#   CONFIG:   default configs/resnet9.json
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: torch_resnet9.sh OUT_DIR [DATA_DIR] [CONFIG]}
data=${2:-$(bash "$root/scripts/data.sh" "$root/build")}
config=${3:-$root/configs/resnet9.json}
name=$(basename "$config" .json)
py="$root/scripts/torch/resnet9.py"
mkdir -p "$out"
python3 "$py" --config "$config" --data "$data" --time-steps 50 --profile --out "$out/${name}_time_profile.json"
python3 "$py" --config "$config" --data "$data" --time-steps 50 --benchmark --out "$out/${name}_time_benchmark.json"
python3 "$py" --config "$config" --data "$data" --epochs 0 --out "$out/${name}_train.json"
python3 - "$out" "$name" "$root/docs/perf/anchors.json" <<'PY'
import json, sys
out, name = sys.argv[1], sys.argv[2]
a = json.load(open(sys.argv[3]))["resnet9_batchnorm"]
t = json.load(open(f"{out}/{name}_time_profile.json"))
b = json.load(open(f"{out}/{name}_time_benchmark.json"))
r = json.load(open(f"{out}/{name}_train.json"))["train"]
print(f"summary {name} (docs/perf/anchors.json, BatchNorm ResNet-9: {a['step_ms']} ms/step, {a['images_per_s']:,} "
      f"images/s, {a['peak_memory_gb']} GB, {a['test_acc']}% / {a['tta_acc']}% TTA, {a['wall_s']} s):")
for label, res in (("heuristics", t["time"]), ("benchmark", b["time"])):
    print(f"  step ({label}): {res['ms_per_step']:.2f} ms, {res['images_per_s']:.0f} images/s, "
          f"peak {res['max_memory_allocated_bytes'] / 1e9:.2f} GB")
p = t["profile"]
print(f"  profile: {p['device_ms_per_step']:.2f} ms device time per step: " +
      ", ".join(f"{k} {v:.2f}" for k, v in p["ms_per_step_by_category"].items()))
print(f"  training: {r['test_acc']:.2f}% test, {r['test_acc_flip_tta']:.2f}% with flip TTA, "
      f"{r['train_wall_s']:.1f} s for {r['epochs']} epochs")
PY
