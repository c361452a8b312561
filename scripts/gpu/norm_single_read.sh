#!/usr/bin/env bash
# The single-read normalization paths in one device run (under 4 minutes).
#   scripts/gpu/norm_single_read.sh BIN_DIR OUT_DIR
# BIN_DIR holds minidl and minidl_tests built for sm_90. Stages, each logged in OUT_DIR:
#   tests     minidl_tests "[norm][cuda]": every path (block, cluster x2..x16, warp, 3-launch) forced
#             and on auto, against the float64 oracle and the CPU, ragged and misaligned shapes,
#             bit-identical reruns, NaN/Inf, accuracy at mean 1e4, the automatic choice;
#   bench     scripts/gpu/norm.sh: `minidl bench norm` on auto (validates before timing, prints the
#             path of each pass and its fraction of the copy bandwidth) beside PyTorch in the same
#             run, then the targets;
#   baseline  `minidl bench norm --path 3-launch` (20 reps): today's path in the same run, for
#             "backward no slower than today" and the per-shape gain.
# Ends with a summary table; exits 1 when any stage failed (a failing stage does not stop the next).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:?usage: norm_single_read.sh BIN_DIR OUT_DIR}
out=${2:?usage: norm_single_read.sh BIN_DIR OUT_DIR}
source "$root/scripts/gpu/run_stage.sh"
gpu_setup "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv,noheader || true
git -C "$root" log -1 --format='commit %h %s' 2>/dev/null || true
declare -A rc
logged() {  # logged NAME LOG CMD...: run CMD with its output in LOG, keeping its exit status for the summary
  local name=$1 log=$2
  shift 2
  run "$@" > "$log" 2>&1
  rc[$name]=$?
  head -1 "$log"; tail -1 "$log"
}

logged tests "$out/tests.log" timeout 100 "$bin/minidl_tests" "[norm][cuda]"
grep -E "^norm \[cuda\]|FAILED|REQUIRE|CHECK\(|with expansion|test cases|All tests passed" "$out/tests.log" | tail -40

logged bench "$out/bench.log" timeout 100 bash "$root/scripts/gpu/norm.sh" "$bin/minidl" "$out/norm"
sed -n '/^layer /,$p' "$out/norm/norm_minidl.txt" 2>/dev/null
grep -A40 "== side by side" "$out/bench.log" | tail -40

logged baseline "$out/baseline.log" timeout 35 "$bin/minidl" bench norm --path 3-launch --reps 20 --warmup 5 \
  --json "$out/norm_3launch.json"

echo
echo "== summary"
printf "%-9s %4s  %s\n" stage rc result
printf "%-9s %4s  %s\n" tests "${rc[tests]}" "$(grep -E "test cases|All tests passed" "$out/tests.log" | tail -1)"
printf "%-9s %4s  %s\n" bench "${rc[bench]}" "$(grep -E "^oracle check" "$out/bench.log" | tail -1)"
printf "%-9s %4s  %s\n" baseline "${rc[baseline]}" "$(grep -cE '\| ok$' "$out/baseline.log") shapes validated on 3-launch"
if [ -f "$out/norm/norm_minidl.json" ] && [ -f "$out/norm_3launch.json" ]; then
  python3 - "$out/norm/norm_minidl.json" "$out/norm_3launch.json" <<'PY'
import json, sys
auto = json.load(open(sys.argv[1]))["results"]
base = {(r["layer"], r["shape"]): r for r in json.load(open(sys.argv[2]))["results"]}
print(f"\n{'layer':11s} {'shape':22s} | {'fwd path':10s} {'x floor':>7s} {'bw':>4s} {'gain':>5s} | "
      f"{'bwd path':10s} {'x floor':>7s} {'bw':>4s} {'gain':>5s}   (gain = 3-launch ms / auto ms, same run)")
for r in auto:
    b = base.get((r["layer"], r["shape"]))
    gf = b["fwd_ms"] / r["fwd_ms"] if b else float("nan")
    gb = b["bwd_ms"] / r["bwd_ms"] if b else float("nan")
    slower = "  <- bwd slower than 3-launch" if gb < 0.97 else ""
    print(f"{r['layer']:11s} {r['shape']:22s} | {r['fwd_path']:10s} {r['fwd_ms'] / r['floor_fwd_ms']:7.2f} "
          f"{100 * r['fwd_bandwidth_fraction']:3.0f}% {gf:5.2f} | {r['bwd_path']:10s} "
          f"{r['bwd_ms'] / r['floor_bwd_ms']:7.2f} {100 * r['bwd_bandwidth_fraction']:3.0f}% {gb:5.2f}{slower}")
PY
fi
grep -E "geometric mean|forward .*x \(|MISSED|met" "$out/bench.log" | tail -12
gpu_finish norm_single_read.sh
