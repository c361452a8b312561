# The GPU stage runner, sourced by scripts/gpu/check_all.sh and by every stage script it runs
# (airbench.sh, graph.sh, half_safetensors.sh, norm_single_read.sh, onnx_check.sh,
# tensorboard_check.sh), so each can also be run alone. Every path comes from the caller: the
# stage's output folder, and the data folder in $CIFAR10_DIR.
#   gpu_setup OUT   makes OUT, clears OUT/FAILED, sets the library path, and CIFAR10_DIR /
#                   MINIDL_DATA_DIR: $CIFAR10_DIR when set, else CIFAR-10 decoded into OUT/cifar10
#   run CMD...      runs CMD, printing it, its exit status and seconds; a failure is listed in
#                   OUT/FAILED (run is called inside pipelines, so a shell variable would not
#                   survive) and does not stop the stages after it
#   gpu_finish NAME prints what failed and exits 1 when OUT/FAILED is not empty, else 0
gpu_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

gpu_setup() {
  out=$1
  mkdir -p "$out"
  rm -f "$out/FAILED"
  [ -d "$gpu_root/.devshare/lib" ] && export LD_LIBRARY_PATH="$gpu_root/.devshare/lib:${LD_LIBRARY_PATH:-}"
  export PYTHONUNBUFFERED=1
  if [ -z "${CIFAR10_DIR:-}" ]; then
    CIFAR10_DIR=$out/cifar10
    if [ -f "$gpu_root/.devshare/tools/prepare-cifar10.sh" ]; then
      [ -f "$CIFAR10_DIR/test_batch.bin" ] || bash "$gpu_root/.devshare/tools/prepare-cifar10.sh" "$CIFAR10_DIR" >/dev/null
    else
      CIFAR10_DIR=$(bash "$gpu_root/scripts/data.sh" "$out")
    fi
  fi
  export CIFAR10_DIR MINIDL_DATA_DIR=$CIFAR10_DIR
}

run() {
  echo "== $*"
  local t0=$SECONDS rc=0
  "$@" || rc=$?
  echo "== rc=$rc in $((SECONDS - t0)) s"
  [ "$rc" -eq 0 ] || echo "rc=$rc: $*" >> "$out/FAILED"
  return "$rc"
}

gpu_finish() {
  if [ -s "$out/FAILED" ]; then
    echo "$1: failed:"
    cat "$out/FAILED"
    exit 1
  fi
  echo "$1: all stages passed"
  exit 0
}
