#!/usr/bin/env bash
# Issue 12 in one device run (under 4 minutes): the single-read normalization paths.
#   scripts/gpu/norm_single_read.sh BIN_DIR OUT_DIR
# BIN_DIR holds minidl and minidl_tests built for sm_90. Stages, each logged in OUT_DIR:
#   tests     minidl_tests "[norm][cuda]": every path (block, cluster x2..x16, warp, 3-launch) forced
#             and on auto, against the float64 oracle and the CPU, ragged and misaligned shapes,
#             bit-identical reruns, NaN/Inf, accuracy at mean 1e4, the automatic choice;
#   bench     scripts/gpu/norm.sh: `minidl bench norm` on auto (validates before timing, prints the
#             path of each pass and its fraction of the copy bandwidth) beside PyTorch in the same
#             run, then the issue's targets;
#   baseline  `minidl bench norm --path 3-launch` (20 reps): today's path in the same run, for
#             "backward no slower than today" and the per-shape gain.
# Ends with a summary table; exits 1 when any stage failed (a failing stage does not stop the next).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:?usage: norm_single_read.sh BIN_DIR OUT_DIR}
out=${2:?usage: norm_single_read.sh BIN_DIR OUT_DIR}
mkdir -p "$out"
[ -d "$root/.devshare/lib" ] && export LD_LIBRARY_PATH="$root/.devshare/lib:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv,noheader || true
git -C "$root" log -1 --format='commit %h %s' 2>/dev/null || true

declare -A rc secs
stage() {  # stage NAME LOG CMD...: runs CMD, output to LOG and to a filtered view here
  local name=$1 log=$2 t0=$SECONDS code=0
  shift 2
  echo "== $name: $*"
  "$@" > "$log" 2>&1 || code=$?
  rc[$name]=$code
  secs[$name]=$((SECONDS - t0))
  echo "== $name: rc=$code in ${secs[$name]} s (log $log)"
}

stage tests "$out/tests.log" timeout 100 "$bin/minidl_tests" "[norm][cuda]"
grep -E "^norm \[cuda\]|FAILED|REQUIRE|CHECK\(|with expansion|test cases|All tests passed" "$out/tests.log" | tail -40

stage bench "$out/bench.log" timeout 100 bash "$root/scripts/gpu/norm.sh" "$bin/minidl" "$out/norm"
sed -n '/^layer /,$p' "$out/norm/norm_minidl.txt" 2>/dev/null
grep -A40 "== side by side" "$out/bench.log" | tail -40

stage baseline "$out/baseline.log" timeout 35 "$bin/minidl" bench norm --path 3-launch --reps 20 --warmup 5 \
  --json "$out/norm_3launch.json"

echo
echo "== summary"
printf "%-9s %4s %6s  %s\n" stage rc seconds result
printf "%-9s %4s %6s  %s\n" tests "${rc[tests]}" "${secs[tests]}" \
  "$(grep -E "test cases|All tests passed" "$out/tests.log" | tail -1)"
printf "%-9s %4s %6s  %s\n" bench "${rc[bench]}" "${secs[bench]}" "$(grep -E "^oracle check" "$out/bench.log" | tail -1)"
printf "%-9s %4s %6s  %s\n" baseline "${rc[baseline]}" "${secs[baseline]}" \
  "$(grep -cE '\| ok$' "$out/baseline.log") shapes validated on 3-launch"
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
failed=0
for s in tests bench baseline; do [ "${rc[$s]}" -eq 0 ] || { echo "norm_single_read.sh: stage $s failed (rc=${rc[$s]})"; failed=1; }; done
exit $failed
