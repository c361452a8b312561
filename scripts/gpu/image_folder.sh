#!/usr/bin/env bash
# airbench94 from the CIFAR-10 JPEG folder against the same images as binaries, on the GPU.
#   scripts/gpu/image_folder.sh BIN_DIR OUT_DIR [DATA_TAR] [RUNS]
# BIN_DIR holds minidl and minidl_tests built with CUDA; DATA_TAR is cifar10-jpeg.tar.xz (default:
# .devshare/data/cifar10-jpeg.tar.xz); the binaries are $CIFAR10_DIR, else prepare-cifar10.sh's
# decode into OUT_DIR/cifar10 (scripts/gpu/run_stage.sh); the folder goes to OUT_DIR/cifar10-jpeg.
# Stages, each listed in OUT_DIR/FAILED when it fails (the script then exits 1):
#   1. the [data] [cuda] tests (GPU batches of any image size equal the CPU's)
#   2. the archive extracted to a folder (train/<class>/*.jpg, test/<class>/*.jpg); the binaries
#      are PIL's decode of the same JPEGs
#   3. minidl bench data: decode + cache images/s, cache read, training batches from the cache and
#      from the binaries, and the pixels' sha256; PIL's decode (scripts/bench/pil_decode.py, all
#      cores) and the binaries' sha256 in the same order (scripts/gpu/cifar_pixels.py): the three
#      hashes must be equal ("pixels: EQUAL")
#   4. minidl bench accuracy for configs/airbench94.json in bf16 channels_last (its fastest
#      setting, README), RUNS runs (default 10) from the folder (one config change:
#      data.format=image_folder) and from the binaries. Both hold the images in a fixed shuffled
#      order, but not the same one, so a seed's batches differ: the means agree within the runs' spread.
# Expected wall time: about 4 minutes with 10 runs.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
usage="usage: image_folder.sh BIN_DIR OUT_DIR [DATA_TAR] [RUNS]"
bin=${1:?$usage}
out=${2:?$usage}
tar=${3:-$root/.devshare/data/cifar10-jpeg.tar.xz}
runs=${4:-10}
source "$root/scripts/gpu/run_stage.sh"
gpu_setup "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
echo "cores: $(nproc)"

run timeout 300 "$bin/minidl_tests" "[data][cuda]" 2>&1 | tee "$out/cuda_tests.log" | grep -E "passed|failed|FAILED|SKIPPED" | tail -5

folder=$out/cifar10-jpeg
rm -rf "$folder" && mkdir -p "$folder"
run tar -xJf "$tar" -C "$folder"
echo "extracted $(find "$folder" -name '*.jpg' | wc -l) JPEGs into $folder"

run timeout 300 "$bin/minidl" bench data --dir "$folder" --image-size 32 --device cuda --cifar10 "$CIFAR10_DIR" 2>&1 |
  tee "$out/bench_data.log"
py=python3
python3 -c "import PIL, numpy" 2>/dev/null || py=/usr/bin/python3
for split in train test; do
  run timeout 300 "$py" "$root/scripts/bench/pil_decode.py" "$folder" --image-size 32 --split "$split" 2>&1 |
    tee -a "$out/pil.log"
done
run timeout 120 "$py" "$root/scripts/gpu/cifar_pixels.py" "$CIFAR10_DIR" 2>&1 | tee "$out/binary_pixels.log"
for split in train test; do
  hashes=$(cat "$out/bench_data.log" "$out/pil.log" "$out/binary_pixels.log" |
           grep "pixels sha256 (class-sorted) $split " | awk '{print $5}' | sort -u)
  n=$(grep -c . <<<"$hashes")
  found=$(cat "$out/bench_data.log" "$out/pil.log" "$out/binary_pixels.log" | grep -c "pixels sha256 (class-sorted) $split ")
  if [ "$n" -eq 1 ] && [ "$found" -eq 3 ]; then
    echo "pixels $split: EQUAL (minidl's decode, PIL's decode and prepare-cifar10.sh's binaries: $hashes)"
  else
    echo "pixels $split: DIFFER or missing ($found hashes: $hashes)"
    echo "pixels $split" >>"$out/FAILED"
  fi
done

fast=(--set precision=bf16 --set memory_format=channels_last)
run timeout 300 "$bin/minidl" bench accuracy --config "$root/configs/airbench94.json" --device cuda --runs "$runs" \
  "${fast[@]}" --set data.format=image_folder --set data.dir="$folder" --set data.image_size=32 \
  --json "$out/airbench94_folder.json" 2>&1 | tee "$out/airbench94_folder.log"
run timeout 300 "$bin/minidl" bench accuracy --config "$root/configs/airbench94.json" --device cuda --runs "$runs" \
  "${fast[@]}" --set data.dir="$CIFAR10_DIR" --json "$out/airbench94_binary.json" 2>&1 | tee "$out/airbench94_binary.log"
echo "== airbench94 (bf16, channels_last), $runs runs each =="
for src in folder binary; do
  echo "from the $src: $(grep -E "^(test accuracy|TTA accuracy|time per run)" "$out/airbench94_$src.log" | tr '\n' ' ')"
done
gpu_finish image_folder.sh
