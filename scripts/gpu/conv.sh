#!/usr/bin/env bash
# Convolution speed on the GPU, minidl (cuDNN through our plans) beside PyTorch, in one device run.
#   scripts/gpu/conv.sh MINIDL_BINARY OUT_DIR
# Runs `minidl bench conv --device cuda` and scripts/bench/torch_conv.py at ResNet-9's shapes
# (batch 512), keeps both outputs and CSVs in OUT_DIR, then prints one table: per shape, direction
# and setting, both times and torch/minidl (above 1: minidl is faster), and per setting the
# convolution time of one ResNet-9 training step. Exits non-zero if either benchmark fails.
set -euo pipefail
bin=${1:?usage: conv.sh MINIDL_BINARY OUT_DIR}
out=${2:?usage: conv.sh MINIDL_BINARY OUT_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true
echo "== minidl bench conv --device cuda"
"$bin" bench conv --device cuda --csv "$out/conv_minidl.csv" | tee "$out/conv_minidl.txt"
echo "== scripts/bench/torch_conv.py"
python3 "$root/scripts/bench/torch_conv.py" --csv "$out/conv_torch.csv" | tee "$out/conv_torch.txt"

echo "== side by side (ms per call; torch/minidl > 1 means minidl is faster)"
python3 - "$out/conv_minidl.csv" "$out/conv_torch.csv" <<'PY'
import csv, sys

def load(path):
    with open(path) as f:
        return {(r["shape"], r["direction"], r["tf32"], r["deterministic"]): r for r in csv.DictReader(f)}

ours, theirs = load(sys.argv[1]), load(sys.argv[2])
counts = {"3->64 @32x32 k3": 1, "64->128 @32x32 k3": 1, "128->128 @16x16 k3": 2, "128->256 @16x16 k3": 1,
          "256->512 @8x8 k3": 1, "512->512 @4x4 k3": 2}
missing = [k for k in theirs if k not in ours]
if missing:
    sys.exit(f"conv.sh: minidl has no row for {missing[0]} (and {len(missing) - 1} more)")
for tf32 in ("1", "0"):
    for det in ("1", "0"):
        print(f"\nTF32 {'on' if tf32 == '1' else 'off'}, deterministic {'on' if det == '1' else 'off'}")
        print(f"{'shape':20s} {'direction':10s} {'minidl':>8s} {'torch':>8s} {'torch/minidl':>12s}  minidl algorithm")
        step = {"minidl": 0.0, "torch": 0.0}
        for shape, count in counts.items():
            for direction in ("fwd", "bwd_data", "bwd_filter"):
                key = (shape, direction, tf32, det)
                m, t = float(ours[key]["ms"]), float(theirs[key]["ms"])
                algo = ours[key]["algorithms"]
                part = {"fwd": 0, "bwd_data": 1, "bwd_filter": 2}[direction]
                algo = algo.split(" | ")[part] if " | " in algo else algo
                print(f"{shape:20s} {direction:10s} {m:8.4f} {t:8.4f} {t / m:12.2f}  {algo}")
                if not (direction == "bwd_data" and shape.startswith("3->")):
                    step["minidl"] += count * m
                    step["torch"] += count * t
        print(f"{'ResNet-9 step total':31s} {step['minidl']:8.3f} {step['torch']:8.3f} "
              f"{step['torch'] / step['minidl']:12.2f}")
PY
