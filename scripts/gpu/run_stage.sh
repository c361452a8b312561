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

# The bits of shipped configs against a build from before a change: for each CONFIG:STEPS,
# `minidl repro` (graphed against eager) with BASE_BIN_DIR's and BIN_DIR's minidl, whose final
# weights' sha256 must be equal (a difference is listed in $out/FAILED).
#   same_bits BASE_BIN_DIR BIN_DIR CONFIG:STEPS...
same_bits() {
  local base=$1 bin=$2 pair cfg steps side dir a b
  shift 2
  for pair in "$@"; do
    cfg=${pair%%:*} steps=${pair##*:}
    for side in base new; do
      dir=$bin
      [ "$side" = base ] && dir=$base
      run timeout 300 "$dir/minidl" repro --config "$gpu_root/configs/$cfg.json" --device cuda --steps "$steps" \
        --set cuda_graph=true --set-b cuda_graph=false --output "$out/repro_${cfg}_$side" | tee "$out/repro_${cfg}_$side.log"
    done
    a=$(grep -o 'sha256 A [0-9a-f]*' "$out/repro_${cfg}_base.log")
    b=$(grep -o 'sha256 A [0-9a-f]*' "$out/repro_${cfg}_new.log")
    echo "$cfg: before the change ${a#sha256 A }, after ${b#sha256 A }"
    [ -n "$a" ] && [ "$a" = "$b" ] || echo "$cfg: the final weights differ from the build before the change" >> "$out/FAILED"
  done
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
