#!/usr/bin/env bash
# The profile with its roofline on the GPU (docs/profiling.md), in one device run.
#   scripts/gpu/profile_check.sh BIN_DIR OUT_DIR
# BIN_DIR holds minidl built with CUDA; the data is $CIFAR10_DIR, else decoded into OUT_DIR/cifar10
# (scripts/gpu/run_stage.sh). Runs, each listed in OUT_DIR/FAILED when it fails (the
# script then exits 1):
#   1. minidl profile of configs/resnet9_bf16.json (the README's table), configs/resnet9.json
#      (with --set precision=fp32 --set memory_format=contiguous: float32 with TF32, the setting
#      `minidl bench conv` times) and configs/airbench94.json (float32 NCHW too),
#      --steps 20 each, into OUT_DIR/{resnet9_bf16,resnet9,airbench94}; the device limits are
#      measured into OUT_DIR/limits.json on the first and reused by the others
#   2. minidl bench conv --device cuda (cuDNN alone at ResNet-9's shapes, batch 512)
#   3. minidl profile --compare of the float32 and bf16 ResNet-9 profiles
#   4. a table joining 1 and 2: per conv shape, forward and backward TFLOP/s in the float32
#      profile's rows beside the benchmark's (TF32 on, deterministic: the run's settings), and
#      their ratio; the target is within 10% (a row's own time also holds its weight's cast)
# About 2 minutes. Prints the tables; the files stay in OUT_DIR.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:?usage: profile_check.sh BIN_DIR OUT_DIR}
out=${2:?usage: profile_check.sh BIN_DIR OUT_DIR}
source "$root/scripts/gpu/run_stage.sh"
gpu_setup "$out"
export MINIDL_LIMITS_CACHE=$out/limits.json
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true

for cfg in resnet9_bf16 resnet9 airbench94; do
  mode=()
  [ "$cfg" = resnet9_bf16 ] || mode=(--set precision=fp32 --set memory_format=contiguous)
  run timeout 200 "$bin/minidl" profile --config "$root/configs/$cfg.json" --set data.dir="$CIFAR10_DIR" "${mode[@]}" \
    --device cuda --steps 20 --output "$out/$cfg" 2>&1 | tee "$out/$cfg.log"
done
run timeout 150 "$bin/minidl" bench conv --device cuda --csv "$out/conv.csv" 2>&1 | tee "$out/conv.log"
run "$bin/minidl" profile --compare "$out/resnet9/profile.json" "$out/resnet9_bf16/profile.json" 2>&1 |
  tee "$out/compare.log"

echo "== conv rows of the float32 profile beside minidl bench conv (TF32 on, deterministic)"
python3 - "$out/resnet9/profile.json" "$out/conv.csv" <<'PY' || echo "rc=1: conv join" >> "$out/FAILED"
import csv, json, re, sys

profile = json.load(open(sys.argv[1]))
bench = {}
for r in csv.DictReader(open(sys.argv[2])):
    if r["impl"] == "minidl" and r["tf32"] == "1" and r["deterministic"] == "1":
        bench.setdefault(r["shape"], {})[r["direction"]] = float(r["ms"])
batch = 512

def gflop(shape):  # "64->128 @32x32 k3": k3 p1 s1, so the output is the input's size
    m = re.match(r"(\d+)->(\d+) @(\d+)x(\d+) k(\d+)", shape)
    c, o, h, w, k = map(int, m.groups())
    return 2.0 * batch * o * h * w * c * k * k / 1e9, c, o

print(f"{'row':34s} {'shape':20s} {'fwd TF/s':>9s} {'bench':>7s} {'ratio':>6s} {'bwd TF/s':>9s} {'bench':>7s} {'ratio':>6s}")
worst = 0.0
for row in profile["rows"]:
    if row.get("type") != "Conv2d" or not isinstance(row.get("work"), dict):
        continue
    calls = max(1, row["fwd_calls"])
    per_call = row["work"]["fwd"]["flops"] / calls / 1e9
    match = None
    for shape in bench:
        g, c, o = gflop(shape)
        if abs(g - per_call) < 1e-6 * g and f" {c}->{o} " in f" {row['name']} ".replace("Conv2d ", ""):
            match = shape
    if match is None:
        print(f"{row['name']:34s} (no bench shape with {per_call:.3f} GFLOP)")
        continue
    g, c, _ = gflop(match)
    b = bench[match]
    fwd_p = row["work"]["fwd"].get("tflops", 0)
    fwd_b = g / b["fwd"]
    # Backward: data (not for the first layer, whose input needs no gradient) and filter.
    bwd_flops = g * (1 if c == 3 else 2)
    bwd_b = bwd_flops / ((0 if c == 3 else b["bwd_data"]) + b["bwd_filter"])
    bwd_p = row["work"]["bwd"].get("tflops", 0)
    rf, rb = fwd_p / fwd_b, bwd_p / bwd_b
    worst = max(worst, abs(1 - rf), abs(1 - rb))
    print(f"{row['name']:34s} {match:20s} {fwd_p:9.1f} {fwd_b:7.1f} {rf:6.2f} {bwd_p:9.1f} {bwd_b:7.1f} {rb:6.2f}")
print(f"largest difference: {100 * worst:.1f}% (target: within 10%)")
PY
gpu_finish profile_check.sh
