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
settings = [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")]  # the default (TF32 on, deterministic) last
steps = {}
for tf32, det in settings:
    print(f"\nTF32 {'on' if tf32 == '1' else 'off'}, deterministic {'on' if det == '1' else 'off'}")
    print(f"{'shape':20s} {'direction':10s} {'minidl':>8s} {'torch':>8s} {'torch/minidl':>12s}  minidl algorithm")
    step = {"minidl": 0.0, "torch": 0.0}
    for shape, count in counts.items():
        for part, direction in enumerate(("fwd", "bwd_data", "bwd_filter")):
            key = (shape, direction, tf32, det)
            m, t = float(ours[key]["ms"]), float(theirs[key]["ms"])
            algo = ours[key]["algorithms"].split(" | ")
            algo = algo[part] if len(algo) == 3 else ""
            print(f"{shape:20s} {direction:10s} {m:8.4f} {t:8.4f} {t / m:12.2f}  {algo}")
            if not (direction == "bwd_data" and shape.startswith("3->")):  # the first layer's input is data
                step["minidl"] += count * m
                step["torch"] += count * t
    steps[(tf32, det)] = step
print("\n== one ResNet-9 training step's convolutions, ms (torch/minidl > 1: minidl is faster)")
for tf32, det in settings:
    m, t = steps[(tf32, det)]["minidl"], steps[(tf32, det)]["torch"]
    print(f"  TF32 {'on' if tf32 == '1' else 'off':3s} deterministic {'on' if det == '1' else 'off':3s}: "
          f"minidl {m:7.2f}  torch {t:7.2f}  torch/minidl {t / m:5.2f}")
PY
