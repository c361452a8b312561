#!/usr/bin/env bash
# ctest side_by_side: scripts/bench/side_by_side.py on the CPU: a minidl config row (two short
# runs), and a stand-in airbench-style script that prints a warm-up row, finished runs between
# running-mean lines rewritten with '\r', and then never ends: the driver reads two runs, stops
# it, and prints both rows' means and standard deviations; --table prints the saved rows again;
# a script that ends without a run, one that hangs, and usage mistakes are reported.
#   tests/side_by_side_test.sh MINIDL PYTHON3 SOURCE_DIR DATA_DIR
# Exit 4 (ctest: skipped) without the data.
set -euo pipefail
minidl=$1 python=$2 src=$3 data=$4
source "$src/tests/script_checks.sh"
require_data "$data"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
driver=("$python" "$src/scripts/bench/side_by_side.py")
# The .pt files exist and are newer than the binaries, so the driver keeps them (no PyTorch needed).
mkdir -p "$work/out/cifar10"
touch "$work/out/cifar10/train.pt" "$work/out/cifar10/test.pt"
cat > "$work/fake_airbench.py" <<'PY'
import os, sys, time
assert os.path.isfile("cifar10/train.pt") and os.path.isfile("cifar10/test.pt"), os.getcwd()
print("-" * 60)
print("|  run     |  epoch  |  train_acc  |  val_acc  |  tta_val_acc  |  time_seconds  |")
print("|  warmup  |   eval  |     0.1000  |   0.1000  |       0.1000  |        9.0000  |")
for run, (acc, secs) in enumerate([(0.9000, 1.0), (0.9100, 1.2), (0.5, 5.0)], 1):
    print(f"|  {run:6d}  |      1  |     0.8000  |   0.8000  |               |                |")
    print(f"|  {run:6d}  |   eval  |     0.9500  |   0.8900  |  {acc:11.4f}  |  {secs:12.4f}  |")
    print(f"Mean accuracy after {run} runs: {acc:.6f}", end="\r", flush=True)
while True:
    time.sleep(1)
PY
printf 'print("no table here")\n' > "$work/silent.py"
printf 'import time\nprint("starting", flush=True)\ntime.sleep(600)\n' > "$work/hangs.py"

"${driver[@]}" --minidl "$minidl" --data "$data" --device cpu --runs 2 --work "$work/out" \
  --config "$src/tests/onnx/all_layers_a.json --set data.train_limit=256 --set data.test_limit=200 --set epochs=1 --set eval.tta=flip" \
  --torch-script "$work/fake_airbench.py" > "$work/table.txt"
cat "$work/table.txt"
grep -q "minidl all_layers_a.json --set data.train_limit=256" "$work/table.txt" || { echo "FAIL: no minidl row"; exit 1; }
grep -Eq "torch fake_airbench.py +2 +90.50% \(std 0.71\) +1.100 s \(std 0.141\)" "$work/table.txt" ||
  { echo "FAIL: the script's row is not the mean and std of its two runs"; exit 1; }
"$python" - "$work/out" <<'PY'
import json, sys
rows = {r["kind"]: r for r in (json.load(open(f"{sys.argv[1]}/{n}")) for n in
        ["minidl_all_layers_a.json_--set_data.train_limit_256_--set_data.test_limit_200_--set_epochs_1_--set_eval.tta_flip.json",
         "torch_fake_airbench.py.json"])}
m = rows["minidl"]
assert len(m["tta_acc"]) == 2 and all(0 <= a <= 100 for a in m["tta_acc"]) and all(s > 0 for s in m["seconds"]), m
assert rows["torch"]["tta_acc"] == [90.0, 91.0] and rows["torch"]["seconds"] == [1.0, 1.2], rows["torch"]
PY
# The stand-in never ends by itself: it was stopped once two runs were in.
if pgrep -f "$work/fake_airbench.py" >/dev/null; then echo "FAIL: the script was left running"; exit 1; fi
# --table prints the same table again (the run printed the rows' commands and output above it).
"${driver[@]}" --table --work "$work/out" | diff - <(sed -n '/^run  *runs /,$p' "$work/table.txt")
# A script without a run, and one that hangs past --timeout: named, exit 1, the table still printed.
if "${driver[@]}" --data "$data" --work "$work/out" --torch-script "$work/silent.py" > "$work/silent.txt"; then
  echo "FAIL: a script without a finished run passed"; exit 1
fi
grep -q "torch silent.py: no finished run read" "$work/silent.txt" || { cat "$work/silent.txt"; exit 1; }
if "${driver[@]}" --data "$data" --work "$work/out" --timeout 3 --torch-script "$work/hangs.py" > "$work/hangs.txt"; then
  echo "FAIL: a hanging script passed"; exit 1
fi
grep -q "torch hangs.py: no finished run read" "$work/hangs.txt" || { cat "$work/hangs.txt"; exit 1; }
# Usage mistakes: one message and exit 2.
for bad in "--work $work/out" "--work $work/out --data $data --config x.json" "--work $work/out --runs 0 --table"; do
  rc=0
  read -ra args <<< "$bad"
  "${driver[@]}" "${args[@]}" 2> "$work/err.txt" || rc=$?
  [ "$rc" -eq 2 ] || { cat "$work/err.txt"; echo "FAIL: '$bad' exited $rc, not 2"; exit 1; }
done
echo "side_by_side: the driver's rows, table, stop and errors are as expected"
