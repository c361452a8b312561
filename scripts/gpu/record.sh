#!/usr/bin/env bash
# The CIFAR-10 speedrun record beside minidl, in one device session (docs/perf/airbench.md, "The
# record's recipe"). Builds nothing.
#   scripts/gpu/record.sh BIN_DIR OUT_DIR RECORD_SCRIPT [RUNS] [PARTS]
# BIN_DIR holds minidl and minidl_tests built with CUDA; RECORD_SCRIPT is the record's
# cifar10_speedrun.py (hiverge/cifar10-speedrun), or another airbench-style script; RUNS per row
# (default 25: a 0.05-point difference needs that many); the data is $CIFAR10_DIR, else CIFAR-10
# decoded into OUT_DIR/cifar10 (scripts/gpu/run_stage.sh). PARTS (default "tests minidl torch
# table"), any of, so that the comparison can be split over calls of at most 10 minutes:
#   tests   the [cuda] tests of the recipe's features (color jitter, Muon's padded batch, weight
#           decay and interval, TTA views) and graphed = eager bits for 60 steps of the record's
#           config and of configs/airbench94_muon.json (about 1 minute)
#   minidl  scripts/bench/side_by_side.py rows of minidl bench accuracy, RUNS runs each:
#           configs/airbench94_record.json, the same with "ns_batching": "by_shape" (what the
#           padded Newton-Schulz batch gains) and configs/airbench94_muon.json (about 2 minutes)
#   torch   the side_by_side.py row of RECORD_SCRIPT, stopped after RUNS runs; its own timing,
#           after its torch.compile (max-autotune: minutes) and warm-up run, and a ~3 s GPU sleep
#           between runs (about 5-8 minutes in all)
#   table   the one table of every row saved in OUT_DIR/side_by_side (each part saves its rows)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
usage="usage: record.sh BIN_DIR OUT_DIR RECORD_SCRIPT [RUNS] [PARTS]"
bin=${1:?$usage}
out=${2:?$usage}
script=${3:?$usage}
runs=${4:-25}
parts=${5:-tests minidl torch table}
[ -f "$script" ] || { echo "record.sh: no script $script"; exit 2; }
script=$(cd "$(dirname "$script")" && pwd)/$(basename "$script")
source "$root/scripts/gpu/run_stage.sh"
gpu_setup "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv,noheader || true
git -C "$root" log -1 --format='commit %h %s' 2>/dev/null || true
work=$out/side_by_side
driver=(python3 "$root/scripts/bench/side_by_side.py" --data "$CIFAR10_DIR" --runs "$runs" --work "$work")
record=$root/configs/airbench94_record.json

for part in $parts; do
  case $part in
    tests)
      run timeout 200 "$bin/minidl_tests" "[augment][cuda],[muon][cuda],[tta][cuda]" 2>&1 |
        tee "$out/cuda_tests.log" | grep -E "passed|failed|FAILED|SKIPPED" | tail -5
      for cfg in airbench94_record airbench94_muon; do
        run timeout 200 "$bin/minidl" repro --config "$root/configs/$cfg.json" --device cuda --steps 60 \
          --set cuda_graph=true --set-b cuda_graph=false --output "$out/repro_$cfg" 2>&1 | tail -3
      done
      ;;
    minidl)
      run timeout 580 "${driver[@]}" --minidl "$bin/minidl" --config "$record" \
        --config "$record --set optimizer.ns_batching=by_shape" --config "$root/configs/airbench94_muon.json" 2>&1 |
        tee "$out/minidl.log" | grep -vE "^ *[0-9]+ +[0-9]+ " ;;
    torch)
      run timeout 590 "${driver[@]}" --torch-script "$script" --timeout 570 2>&1 | tee "$out/torch.log" | tail -8 ;;
    table)
      echo "== the table (TTA accuracy and seconds per run: mean and std over the runs; same device session)"
      run python3 "$root/scripts/bench/side_by_side.py" --table --work "$work" ;;
    *) echo "record.sh: unknown part '$part' (tests, minidl, torch, table)"; exit 2 ;;
  esac
done
gpu_finish record.sh
