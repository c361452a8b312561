#!/usr/bin/env bash
# ctest guide: every `sh` block of docs/guide.md, in order, in a scratch copy of the repository
# root (configs/, scripts/ and docs/ linked, build/minidl and CIFAR-10 linked, the JPEG subset
# copied into build/). Each `minidl train` runs shortened to 1,280 training and 500 test images and
# 16 steps (an epoch of 10, then 6 of the next; a resume 16 more), `minidl repro` to 500 test
# images; everything else runs as written. A line fails the test when it exits non-zero; the plot
# line is skipped without python3-matplotlib.
#   tests/guide_test.sh MINIDL SOURCE_DIR CIFAR10_DIR JPEG_DIR
# Exit 4 (ctest: skipped) without the decoded CIFAR-10 or the JPEG subset.
set -euo pipefail
minidl=$(realpath "$1") src=$(realpath "$2") cifar=$(realpath "$3") jpeg=$(realpath "$4")
source "$src/tests/script_checks.sh"
require_data "$cifar"
if [ ! -f "$jpeg/.complete" ]; then
  echo "SKIPPED: no JPEG subset at $jpeg (scripts/data_jpeg.sh makes it)"
  exit 4
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/build"
ln -s "$src/configs" "$src/scripts" "$src/docs" "$work/"
ln -s "$minidl" "$work/build/minidl"
# A copy: the image-folder runs write their decode cache beside the images.
cp -r "$jpeg" "$work/build/cifar10-jpeg-small"
export CIFAR10_DIR=$cifar

# The blocks' lines, one command each.
awk '/^```sh$/ {on = 1; next} /^```/ {on = 0} on' "$src/docs/guide.md" >"$work/commands"
[ "$(wc -l <"$work/commands")" -ge 15 ] || { echo "FAIL: docs/guide.md has too few commands"; exit 1; }
has_matplotlib=0
python3 -c "import matplotlib" 2>/dev/null && has_matplotlib=1
cd "$work"
n=0
while IFS= read -r line; do
  n=$((n + 1))
  case $line in
    *"minidl train --resume"*) line="$line --max-steps 32" ;;
    *"minidl train "*) line="$line --max-steps 16 --set data.train_limit=1280 --set data.test_limit=500" ;;
    *"minidl repro "*) line="$line --set data.test_limit=500" ;;
    *scripts/plot.py*) [ "$has_matplotlib" = 1 ] || { echo "guide $n: skipped without matplotlib: $line"; continue; } ;;
  esac
  echo "guide $n: $line"
  if ! bash -c "set -euo pipefail; $line" >"$work/out" 2>&1 </dev/null; then
    tail -n 20 "$work/out"
    echo "FAIL: docs/guide.md command $n failed: $line"
    exit 1
  fi
done <"$work/commands"
grep -q "init_from runs/quick/model.safetensors: loaded 15 tensors" runs/finetune/log.txt ||
  { cat runs/finetune/log.txt; echo "FAIL: the fine-tuning run did not load runs/quick"; exit 1; }
echo "guide: all $n commands ran"
