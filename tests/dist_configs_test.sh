#!/usr/bin/env bash
# ctest dist_configs: every shipped config keeps its bits at world sizes 1, 2 and 4 on the CPU
# (MPI backend): 4 ranks == 2 ranks x accumulate_steps 2 == 1 rank x accumulate_steps 4, the
# same model.safetensors byte for byte after 2 steps. Each config keeps its model, optimizer,
# schedule, lookahead, freeze rules and augmentation; only the sizes shrink so that CI can afford
# it (a global batch of 32, so micro-batches of 8; 256 training images or token windows, or a
# volume config's own synthetic volumes; the CPU in float32).
#   tests/dist_configs_test.sh MINIDL SOURCE_DIR CIFAR10_DIR
# Exit 4 (ctest: skipped) without mpirun, without the data, or with a minidl built without MPI.
set -euo pipefail
minidl=$1 src=$2 data=$3
if ! command -v mpirun >/dev/null; then echo "SKIPPED: no mpirun (scripts/setup.sh installs openmpi-bin)"; exit 4; fi
if [ ! -f "$data/test_batch.bin" ]; then echo "SKIPPED: no CIFAR-10 at $data (scripts/data.sh)"; exit 4; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpi() { mpirun --allow-run-as-root --oversubscribe -np "$@"; }
checked=0
for cfg in "$src"/configs/*.json; do
  name=$(basename "$cfg" .json)
  # The test data is CIFAR-10; a CIFAR-100 config reads the same images in CIFAR-100's layout
  # (scripts/cifar100_standin.py): its bits are what is checked, not its accuracy. A config of
  # another data set is checked by the tests of its loader.
  dir=$data
  if grep -q '"format": *"cifar100"' "$cfg"; then
    dir=$work/cifar100
    [ -f "$dir/test.bin" ] || python3 "$src/scripts/cifar100_standin.py" "$data" "$dir" --limit 256 >/dev/null ||
      { echo "FAIL: scripts/cifar100_standin.py could not make $dir"; exit 1; }
  elif grep -q '"format": *"tokens"' "$cfg"; then
    # A language model's bits on the bytes of README.md; GPT-2 124M itself is more than a CPU
    # affords here, and gpt2_tiny_cpu has its layers.
    if [ "$name" = gpt2_124m ]; then echo "dist_configs: $name SKIPPED (124M parameters; gpt2_tiny_cpu has its layers)"; continue; fi
    dir=$work/tokens
    [ -f "$dir/val.bin" ] || "$minidl" tokenize --tokenizer bytes "$src/README.md" "$dir" >/dev/null ||
      { echo "FAIL: minidl tokenize could not make $dir"; exit 1; }
  elif grep -q '"format": *"volumes"' "$cfg"; then
    # Synthetic volumes are made from the config's seed: no folder. The 4-level UNet at 64^3 is
    # more than a CPU affords here, and unet3d_cpu has its layers (at 16^3, two levels).
    if [ "$name" = unet3d ]; then echo "dist_configs: $name SKIPPED (a 4-level UNet on 64^3 volumes; unet3d_cpu has its layers)"; continue; fi
    dir=
  elif grep -q '"format"' "$cfg" && ! grep -q '"format": *"cifar10"' "$cfg"; then
    echo "dist_configs: $name SKIPPED (its data set is not CIFAR-10)"
    continue
  fi
  data_args=()
  [ -z "$dir" ] || data_args=(--set "data.dir=$dir")
  small=(--config "$cfg" --device cpu "${data_args[@]}" --set data.train_limit=256 --set data.test_limit=100
         --set batch_size=32 --set eval.tta=none --set output.progress=false --max-steps 2)
  "$minidl" train "${small[@]}" --set accumulate_steps=4 --output "$work/$name.1" >"$work/$name.1.out" 2>&1 ||
    { cat "$work/$name.1.out"; echo "FAIL: $name on 1 rank x accumulate_steps 4 failed"; exit 1; }
  rc=0
  mpi 2 "$minidl" train "${small[@]}" --set accumulate_steps=2 --output "$work/$name.2" >"$work/$name.2.out" 2>&1 || rc=$?
  if grep -q "built without MPI" "$work/$name.2.out"; then
    echo "SKIPPED: this minidl was built without MPI, and says so:"; grep -m1 "built without MPI" "$work/$name.2.out"; exit 4
  fi
  [ "$rc" -eq 0 ] || { cat "$work/$name.2.out"; echo "FAIL: $name on 2 ranks x accumulate_steps 2 failed"; exit 1; }
  mpi 4 "$minidl" train "${small[@]}" --output "$work/$name.4" >"$work/$name.4.out" 2>&1 ||
    { cat "$work/$name.4.out"; echo "FAIL: $name on 4 ranks failed"; exit 1; }
  grep -q "data parallel: world size 4 (mpi), 1 micro-batch of 8 per rank" "$work/$name.4.out" ||
    { cat "$work/$name.4.out"; echo "FAIL: $name: no data-parallel line for 4 ranks"; exit 1; }
  a=$(sha256sum <"$work/$name.1/model.safetensors" | cut -d' ' -f1)
  for w in 2 4; do
    b=$(sha256sum <"$work/$name.$w/model.safetensors" | cut -d' ' -f1)
    [ "$a" = "$b" ] || { echo "FAIL: $name: world size $w ($b) differs from world size 1 ($a)"; exit 1; }
  done
  echo "dist_configs: $name: world sizes 1, 2 and 4 give model.safetensors sha256 $a"
  checked=$((checked + 1))
done
[ "$checked" -ge 1 ] || { echo "FAIL: no config was checked"; exit 1; }
echo "dist_configs: $checked configs keep their bits at world sizes 1, 2 and 4"
