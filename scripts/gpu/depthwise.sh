#!/usr/bin/env bash
# Grouped and depthwise convolutions on the GPU: the CUDA tests of the grouped/dilated paths and of
# our depthwise kernels, then the kernels' times at MobileNetV2's and a small ConvNeXt's depthwise
# shapes (batch 512, bf16 channels_last) against the memory floor and PyTorch's cuDNN, in one
# device run.
#   scripts/gpu/depthwise.sh BIN_DIR OUT_DIR
# BIN_DIR holds minidl and minidl_tests built with CUDA. Runs `minidl_tests "[depthwise],[grouped]"`
# (their [cuda] cases included), `minidl bench conv --device cuda --depthwise` and
# scripts/bench/torch_conv.py --depthwise on the same shapes, keeps the outputs and CSVs in
# OUT_DIR, and prints per shape: minidl's forward + backward, the floor (the bytes each pass must
# move at the copy roof), minidl/floor, PyTorch's time and torch/minidl; then the two
# targets (docs/perf/depthwise.md): within 1.5x the floor and faster than PyTorch at every shape.
# Exits non-zero if the tests or a benchmark fail (a missed target is reported, not an error).
set -euo pipefail
bin=${1:?usage: depthwise.sh BIN_DIR OUT_DIR}
out=${2:?usage: depthwise.sh BIN_DIR OUT_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true
echo "== minidl_tests [depthwise],[grouped]"
"$bin/minidl_tests" "[depthwise],[grouped]" 2>&1 | tee "$out/tests.log" | grep -E "test cases|FAILED|failed" || true
grep -q "All tests passed" "$out/tests.log" || { echo "depthwise.sh: the tests failed ($out/tests.log)"; exit 1; }
echo "== minidl bench conv --device cuda --depthwise"
"$bin/minidl" bench conv --device cuda --depthwise --csv "$out/depthwise_minidl.csv" | tee "$out/depthwise_minidl.txt"
echo "== scripts/bench/torch_conv.py --depthwise"
python3 "$root/scripts/bench/torch_conv.py" --depthwise "$out/depthwise_minidl.csv" --csv "$out/depthwise_torch.csv" |
  tee "$out/depthwise_torch.txt"

echo "== side by side (ms per call; torch/minidl > 1 means minidl is faster)"
python3 - "$out/depthwise_minidl.csv" "$out/depthwise_torch.csv" <<'PY'
import csv, sys
from collections import OrderedDict

def load(path):
    rows = OrderedDict()
    with open(path) as f:
        for r in csv.DictReader(f):
            rows.setdefault(r["shape"], {"model": r["model"], "count": int(r["count"])})[r["direction"]] = r
    return rows

ours, theirs = load(sys.argv[1]), load(sys.argv[2])
dirs = ("fwd", "bwd_data", "bwd_filter")
print(f"{'model':12s} {'shape':20s} {'n':>2s} | {'fwd':>7s} {'bwd_d':>7s} {'bwd_f':>7s} {'all':>7s} | {'floor':>7s} "
      f"{'xfloor':>6s} | {'torch':>7s} {'torch/minidl':>12s}")
worst_floor, worst_torch, steps = 0.0, float("inf"), {}
for shape, r in ours.items():
    t = theirs.get(shape)
    if t is None:
        sys.exit(f"depthwise.sh: PyTorch has no row for {shape}")
    ms = [float(r[d]["ms"]) for d in dirs]
    all_ms, torch_ms = sum(ms), sum(float(t[d]["ms"]) for d in dirs)
    floor = float(r["fwd"]["all_floor_ms"])
    worst_floor, worst_torch = max(worst_floor, all_ms / floor), min(worst_torch, torch_ms / all_ms)
    mark = "" if all_ms <= 1.5 * floor and torch_ms > all_ms else "  <- target missed"
    print(f"{r['model']:12s} {shape:20s} {r['count']:2d} | {ms[0]:7.4f} {ms[1]:7.4f} {ms[2]:7.4f} {all_ms:7.4f} | "
          f"{floor:7.4f} {all_ms / floor:6.2f} | {torch_ms:7.4f} {torch_ms / all_ms:12.2f}{mark}")
    step = steps.setdefault(r["model"], [0.0, 0.0])
    step[0] += r["count"] * all_ms
    step[1] += r["count"] * torch_ms
print()
for model, (m, t) in steps.items():
    if m > 0:
        print(f"{model}: one training step's depthwise convolutions: minidl {m:.3f} ms, torch {t:.3f} ms, "
              f"torch/minidl {t / m:.2f}")
print(f"worst minidl/floor {worst_floor:.2f} (target <= 1.5: {'met' if worst_floor <= 1.5 else 'MISSED'}); "
      f"worst torch/minidl {worst_torch:.2f} (target > 1: {'met' if worst_torch > 1 else 'MISSED'})")
PY
