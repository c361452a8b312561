#!/usr/bin/env bash
# ctest plot: scripts/plot.py on two real (tiny) runs and a profile writes valid PNG and SVG
# charts (training, profile, roofline), and a folder that is neither a run nor a profile is one
# clear error.
#   tests/plot_test.sh MINIDL PYTHON3 SOURCE_DIR DATA_DIR
# Exit 4 (ctest: skipped) without python3-matplotlib or the data.
set -euo pipefail
minidl=$1 python=$2 src=$3 data=$4
source "$src/tests/script_checks.sh"
require_python_modules "$python" matplotlib "python3-matplotlib"
require_data "$data"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cfg=$src/tests/onnx/all_layers_a.json
common=(--set data.dir="$data" --set epochs=2 --set eval.tta=flip)
"$minidl" train --config "$cfg" "${common[@]}" --output "$work/seed5" >/dev/null
"$minidl" train --config "$cfg" "${common[@]}" --set seed=6 --output "$work/seed6" >/dev/null
# The device limits are measured into a cache of the test's own.
MINIDL_LIMITS_CACHE="$work/limits.json" \
  "$minidl" profile --config "$cfg" --set data.dir="$data" --steps 2 --warmup 1 --output "$work/prof" >/dev/null
# The profile end to end on the CPU: measured limits, work per row, the allocator's counter track,
# and --compare of the profile with itself (every ratio 1.00x).
"$python" - "$work/prof" "$work/limits.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1] + "/profile.json"))
assert p["limits"]["source"] == "measured" and p["limits"]["peak_tflops"] > 0, p["limits"]
assert p["limits"]["cache_path"] == sys.argv[2], p["limits"]
convs = [r for r in p["rows"] if r["type"] == "Conv2d"]
assert convs and all(r["work"]["fwd"]["flops"] > 0 and "bound" in r["work"]["fwd"] for r in convs)
assert p["memory"]["step_peak_bytes"] > 0 and p["memory"]["peak_row"]
trace = json.load(open(sys.argv[1] + "/trace.json"))
assert any(e["ph"] == "C" for e in trace["traceEvents"]), "no counter track"
PY
"$minidl" profile --compare "$work/prof/profile.json" "$work/prof/profile.json" > "$work/compare"
grep -qE "^total +[0-9.]+ +[0-9.]+ +1\.00x" "$work/compare" || { cat "$work/compare"; echo "FAIL: compare"; exit 1; }
"$python" "$src/scripts/plot.py" "$work/seed5" "$work/seed6" "$work/prof" --out "$work/charts" | tee "$work/list"
# training, profile, roofline, and each run's confusion matrix (from its summary.json), PNG and SVG each.
[ "$(wc -l < "$work/list")" -eq 10 ] || { echo "FAIL: expected 10 files"; exit 1; }
"$python" - "$work/charts" <<'PY'
import os, struct, sys, xml.etree.ElementTree as ET
out = sys.argv[1]
for name in ("training", "profile", "roofline", "confusion_seed5", "confusion_seed6"):
    png = open(os.path.join(out, name + ".png"), "rb").read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR", f"{name}.png: not a PNG"
    w, h = struct.unpack(">II", png[16:24])
    assert w >= 400 and h >= 200 and png.endswith(b"IEND\xaeB`\x82"), f"{name}.png: {w}x{h} or no IEND"
    root = ET.parse(os.path.join(out, name + ".svg")).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg", f"{name}.svg: root is {root.tag}"
    # Matplotlib writes each line and bar as a path; a chart with data has many.
    paths = sum(1 for e in root.iter() if e.tag.endswith("path"))
    assert paths > (10 if name == "roofline" else 50), f"{name}.svg: only {paths} paths"
    print(f"{name}: PNG {w}x{h}, SVG with {paths} paths")
PY
if "$python" "$src/scripts/plot.py" "$work" 2> "$work/err"; then
  echo "FAIL: plot.py accepted a folder with no run or profile"; exit 1
fi
grep -q "neither metrics.jsonl (a run) nor profile.json" "$work/err" || { cat "$work/err"; exit 1; }
echo "plot: ok"
