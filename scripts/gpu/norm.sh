#!/usr/bin/env bash
# Normalization speed on the GPU, minidl beside PyTorch, in one device run.
#   scripts/gpu/norm.sh MINIDL_BINARY OUT_DIR [--dtype bf16|fp16] [--memory-format channels_last]
# Runs `minidl bench norm` (checks the fast kernels against the float64 oracle, then times them
# against the DRAM floor and docs/perf/anchors.md) and scripts/bench/torch_norm.py (PyTorch on this GPU, now),
# keeps both outputs and JSONs in OUT_DIR, then prints one table: per layer and shape, both times
# and torch/minidl from this run (above 1: minidl is faster), and per layer the geometric means
# over the eight large shapes against the forward targets of docs/perf/targets.json ("norm_fp32";
# slower at no shape), and the path each pass took. Exits non-zero if minidl's oracle check or either benchmark fails.
# With --dtype/--memory-format both sides run in that mode (file names get a suffix, e.g.
# norm_minidl_bf16_channels_last.json), minidl is given PyTorch's figures (--torch) and the
# targets are docs/perf/targets.json's "norm_mode": a speedup over PyTorch in geometric mean,
# forward and backward.
set -euo pipefail
bin=${1:?usage: norm.sh MINIDL_BINARY OUT_DIR [--dtype D] [--memory-format F]}
out=${2:?usage: norm.sh MINIDL_BINARY OUT_DIR [--dtype D] [--memory-format F]}
shift 2
dtype=fp32 format=contiguous
while [ $# -gt 0 ]; do
  case $1 in
    --dtype) dtype=${2:?--dtype needs a value}; shift 2 ;;
    --memory-format) format=${2:?--memory-format needs a value}; shift 2 ;;
    *) echo "norm.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
suffix="" torch_args=() mode_args=()
if [ "$dtype" != fp32 ] || [ "$format" != contiguous ]; then
  suffix="_${dtype}_${format}"
  torch_args=(--dtype "$dtype")
  [ "$format" = channels_last ] && torch_args+=(--channels-last)
  mode_args=(--dtype "$dtype" --memory-format "$format" --torch "$out/norm_torch$suffix.json")
fi

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true
if ! python3 -c "import torch" 2>/dev/null; then
  if [ -n "$suffix" ]; then echo "norm.sh: PyTorch is not importable here: no figures of this mode to compare" >&2; exit 1; fi
  echo "== minidl bench norm (PyTorch is not importable here: docs/perf/anchors.md figures only)"
  "$bin" bench norm --json "$out/norm_minidl.json" | tee "$out/norm_minidl.txt"
  exit 1
fi
echo "== scripts/bench/torch_norm.py ${torch_args[*]}"
python3 "$root/scripts/bench/torch_norm.py" "${torch_args[@]}" --json "$out/norm_torch$suffix.json" | tee "$out/norm_torch$suffix.txt"
echo "== minidl bench norm ${mode_args[*]}"
"$bin" bench norm "${mode_args[@]}" --json "$out/norm_minidl$suffix.json" | tee "$out/norm_minidl$suffix.txt"

echo "== side by side (ms per call, CUDA events around one call; torch/minidl > 1 means minidl is faster)"
python3 - "$out/norm_minidl$suffix.json" "$out/norm_torch$suffix.json" "$root/docs/perf/targets.json" <<'PY'
import json, math, sys

ours = json.load(open(sys.argv[1]))
goals = json.load(open(sys.argv[3]))
anchor_mode = ours.get("dtype", "float32") == "float32" and ours.get("memory_format", "contiguous") == "contiguous"
torch = {(r["layer"], r["shape"]): r for r in json.load(open(sys.argv[2]))["results"]}
print(f"{'layer':11s} {'shape':22s} | {'minidl':>8s} {'torch':>8s} {'ratio':>6s} | {'minidl':>8s} {'torch':>8s} "
      f"{'ratio':>6s} | {'x floor fwd/bwd':>15s} | path fwd/bwd")
print(f"{'':34s} | {'forward':^24s} | {'backward':^24s} |")
ratios = {}
for r in ours["results"]:
    t = torch.get((r["layer"], r["shape"]))
    if t is None:
        print(f"{r['layer']:11s} {r['shape']:22s} | no PyTorch measurement")
        continue
    rf, rb = t["fwd_ms"] / r["fwd_ms"], t["bwd_ms"] / r["bwd_ms"]
    mark = "" if rf >= 1 and rb >= 1 else "  <- slower than PyTorch"
    print(f"{r['layer']:11s} {r['shape']:22s} | {r['fwd_ms']:8.4f} {t['fwd_ms']:8.4f} {rf:6.2f} | {r['bwd_ms']:8.4f} "
          f"{t['bwd_ms']:8.4f} {rb:6.2f} | {r['fwd_ms'] / r['floor_fwd_ms']:6.2f} {r['bwd_ms'] / r['floor_bwd_ms']:6.2f} "
          f"| {r.get('fwd_path', '?')}/{r.get('bwd_path', '?')}{mark}")
    if r["large"]:
        ratios.setdefault(r["layer"], []).append((rf, rb))

def geomean(v):
    return math.exp(sum(math.log(e) for e in v) / len(v)) if v else float("nan")

print("\ngeometric mean over the eight large shapes of torch/minidl, measured in this run")
# docs/perf/targets.json: per layer in fp32 NCHW, one figure for every layer in the other modes.
targets = goals["norm_fp32"]["fwd_speedup"] if anchor_mode else \
    {layer: goals["norm_mode"]["speedup"] for layer in sorted({r["layer"] for r in ours["results"]})}
for layer, target in targets.items():
    v = ratios.get(layer, [])
    gf, gb = geomean([f for f, _ in v]), geomean([b for _, b in v])
    ok = lambda g: "met" if g >= target * (1 - 1e-9) else "MISSED"
    if anchor_mode:
        print(f"{layer:11s} forward {gf:5.2f}x ({ok(gf)}, target {target:.1f}x), backward {gb:5.2f}x")
    else:
        print(f"{layer:11s} forward {gf:5.2f}x ({ok(gf)}), backward {gb:5.2f}x ({ok(gb)}); target {target:.1f}x each")
print("oracle check:", "ok" if ours["all_valid"] else "FAILED")
sys.exit(0 if ours["all_valid"] else 1)
PY
