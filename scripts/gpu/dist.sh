#!/usr/bin/env bash
# The NCCL backend on one GPU (NCCL refuses two ranks on one GPU, and the GPU machine has no
# mpirun): a world of one, started without a launcher (--dist nccl). NCCL does the reduction's
# all-to-all and all-gather (to itself) only when a step has several micro-batches, so:
#   1. resnet9_bf16, accumulate_steps 2: --dist nccl == --dist single (the same ordered sum, one
#      through NCCL, one through plain copies), model.safetensors SHA-256;
#   2. the plain run (one micro-batch) == --dist nccl with one micro-batch: world size 1 keeps the
#      bits of a plain run.
#   1b. the same with the gradients in 1-MiB buckets, and in none (bucket_mb 0): the bits of
#      --dist single (a world of one reduces its buckets after backward: docs/perf/data_parallel.md);
#   1c. the steps of 1 and 1b are CUDA graphs holding NCCL's calls: the same run eager
#      (cuda_graph false) gives the same bits;
#   3. `minidl bench allreduce --dist nccl`: the ordered reduction against ncclAllReduce per
#      message size (at world size 1 both are copies; the bus bandwidth needs 2 GPUs).
# Prints both hash pairs, the img/s of each run and the table; exits non-zero on a mismatch or a
# failed run.
#   scripts/gpu/dist.sh BIN_DIR OUT_DIR [STEPS]     (STEPS: 200 by default)
# A minidl built with MPI needs libmpi where it runs; without it, build with -DMINIDL_MPI=OFF
# (NCCL at world size 1 needs no MPI).
set -euo pipefail
bin_dir=${1:?usage: dist.sh BIN_DIR OUT_DIR [STEPS]}
out=${2:?usage: dist.sh BIN_DIR OUT_DIR [STEPS]}
steps=${3:-200}
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/scripts/gpu/run_stage.sh"
gpu_setup "$out"
if ldd "$bin_dir/minidl" | grep -q "not found"; then
  ldd "$bin_dir/minidl" | grep "not found"
  echo "dist.sh: minidl misses a shared library here (libmpi?): rebuild with -DMINIDL_MPI=OFF"
  exit 1
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
cfg=(--config "$root/configs/resnet9_bf16.json" --device cuda --max-steps "$steps" --set output.progress=false)

train() {  # NAME ARGS...
  local name=$1
  shift
  rm -rf "${out:?}/$name"
  run "$bin_dir/minidl" train "${cfg[@]}" --output "$out/$name" "$@" >"$out/$name.txt" 2>&1 || { tail -5 "$out/$name.txt"; return 0; }
  grep -E "^data parallel|^training step|img/s" "$out/$name.txt" | sed "s/^/  $name: /" || true
}
train single_acc2 --dist single --set accumulate_steps=2
train nccl_acc2 --dist nccl --set accumulate_steps=2
train nccl_acc2_buckets --dist nccl --set accumulate_steps=2 --set bucket_mb=1
train nccl_acc2_serial --dist nccl --set accumulate_steps=2 --set bucket_mb=0
train nccl_acc2_eager --dist nccl --set accumulate_steps=2 --set cuda_graph=false
train plain
train nccl_plain --dist nccl

same() {  # A B
  local a b
  a=$(sha256sum <"$out/$1/model.safetensors" 2>/dev/null | cut -d' ' -f1 || true)
  b=$(sha256sum <"$out/$2/model.safetensors" 2>/dev/null | cut -d' ' -f1 || true)
  if [ -n "$a" ] && [ "$a" = "$b" ]; then
    echo "SAME  $1 == $2: $a"
  else
    echo "DIFFER $1 ${a:-missing} != $2 ${b:-missing}"
    echo "dist: $1 != $2" >>"$out/FAILED"
  fi
}
same single_acc2 nccl_acc2
same single_acc2 nccl_acc2_buckets
same single_acc2 nccl_acc2_serial
same single_acc2 nccl_acc2_eager
same plain nccl_plain
for name in single_acc2 nccl_acc2 nccl_acc2_buckets nccl_acc2_serial; do
  grep -q "training step: CUDA graph" "$out/$name.txt" || {
    echo "NOT GRAPHED $name"
    echo "dist: $name ran eagerly" >>"$out/FAILED"
  }
done
# The reduction's time per step alone (world size 1: NCCL's copies to itself and the ordered sum),
# at the default bucket size and at 1 MiB.
for mb in 25 1; do
  run "$bin_dir/minidl" bench train --config "$root/configs/resnet9_bf16.json" --device cuda --dist nccl \
    --set accumulate_steps=2 --set bucket_mb=$mb --steps 50 | grep -E "training:|all-reduce:|overlap:" |
    sed "s/^/  bucket_mb $mb: /" | tee -a "$out/overlap.txt"
done
run "$bin_dir/minidl" bench allreduce --device cuda --dist nccl --max-mib 256 | tee "$out/allreduce.txt"
gpu_finish dist
