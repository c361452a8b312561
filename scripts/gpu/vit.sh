#!/usr/bin/env bash
# The ViT on the GPU, minidl beside its PyTorch twin (scripts/torch/vit.py) in one device run:
#   scripts/gpu/vit.sh BIN_DIR OUT_DIR [CONFIG]
# BIN_DIR holds the built `minidl` (nothing is built here); CONFIG defaults to
# configs/vit_cifar10.json. Runs, keeping every log and JSON in OUT_DIR:
#   1. minidl train (the full recipe: test accuracy, training seconds),
#   2. minidl bench train (ms per step, CUDA graph) and minidl profile (the per-layer rows),
#   3. vit.py: the same recipe trained in PyTorch, and its ms per step eager and torch.compile'd,
# then prints the figures side by side against the targets (>= 79.5% test accuracy,
# <= 10 ms per step, >= 1.7x PyTorch eager, >= 1.2x torch.compile). Exits non-zero if a stage fails.
set -euo pipefail
bin=${1:?usage: vit.sh BIN_DIR OUT_DIR [CONFIG]}
root=$(cd "$(dirname "$0")/../.." && pwd)
config=${3:-$root/configs/vit_cifar10.json}
source "$root/scripts/gpu/run_stage.sh"
gpu_setup "${2:?usage: vit.sh BIN_DIR OUT_DIR [CONFIG]}"
data=$CIFAR10_DIR
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true
git -C "$root" log -1 --format='commit %h %s' 2>/dev/null || true

run timeout 300 "$bin/minidl" train --config "$config" --device cuda --set data.dir="$data" --set output.progress=false \
  --output "$out/minidl_run" --overwrite 2>&1 | tee "$out/minidl_train.log" | grep -vE "^epoch ([2-9]|1[0-9]|2[0-8])/" || true
run timeout 120 "$bin/minidl" bench train --config "$config" --device cuda --set data.dir="$data" --steps 50 \
  2>&1 | tee "$out/minidl_bench.log" || true
run timeout 120 "$bin/minidl" profile --config "$config" --device cuda --set data.dir="$data" --steps 10 \
  --output "$out/minidl_profile" 2>&1 | tee "$out/minidl_profile.log" || true
run timeout 400 python3 "$root/scripts/torch/vit.py" --config "$config" --data "$data" --time-steps 50 --compile \
  --epochs 0 --out "$out/torch_vit.json" 2>&1 | tee "$out/torch_vit.log" | grep -vE "^epoch +([2-9]|1[0-9]|2[0-8]) " || true

echo "== ViT side by side"
python3 - "$out" <<'PY'
import json, os, re, sys
out = sys.argv[1]

def read(path):
    return open(path).read() if os.path.exists(path) else ""

def last_metrics(path):
    lines = [l for l in read(path).splitlines() if l.strip()]
    return json.loads(lines[-1]) if lines else {}

m = last_metrics(f"{out}/minidl_run/metrics.jsonl")
done = re.search(r"training ([0-9.]+)s", read(f"{out}/minidl_train.log"))
bench = read(f"{out}/minidl_bench.log")
step = re.search(r"training: +([0-9.]+) ms/step", bench)
gpu = re.search(r"GPU time: +([0-9.]+) ms/step", bench)
t = json.load(open(f"{out}/torch_vit.json")) if os.path.exists(f"{out}/torch_vit.json") else {}
ms = float(step.group(1)) if step else None
eager = t.get("time", {}).get("ms_per_step")
comp = t.get("time_compile", {}).get("ms_per_step")
acc = m.get("test_acc")
print(f"  minidl:  {acc if acc is not None else 'n/a'}% test, training {done.group(1) + ' s' if done else 'n/a'}, "
      f"{ms if ms else 'n/a'} ms/step (GPU time {gpu.group(1) if gpu else 'n/a'} ms)")
tr = t.get("train", {})
print(f"  PyTorch {t.get('torch', '?')}: {tr.get('test_acc', 'n/a')}% test, training {tr.get('train_wall_s', 'n/a')} s, "
      f"eager {eager} ms/step, torch.compile {comp} ms/step")
if ms and eager and comp:
    print(f"  speed-up: {eager / ms:.2f}x eager (target 1.7x), {comp / ms:.2f}x torch.compile (target 1.2x); "
          f"{'<=' if ms <= 10 else '>'} 10 ms/step")
if acc is not None:
    print(f"  accuracy target 79.5%: {'met' if acc >= 79.5 else 'not met'}")
print(f"  per-layer rows: {out}/minidl_profile.log (LayerNorm rows: % of copy bandwidth)")
PY
gpu_finish vit
