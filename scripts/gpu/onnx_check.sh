#!/usr/bin/env bash
# ONNX round trip on the GPU machine: trains each ResNet-9 config, exports it, and checks
# onnxruntime's logits and test accuracy against minidl's (scripts/gpu/onnx_check.py).
#   scripts/gpu/onnx_check.sh BIN_DIR OUT_DIR [CONFIGS]   (default: resnet9 resnet9_groupnorm resnet9_layernorm)
# BIN_DIR holds a minidl built with CUDA; python3 needs onnx, onnxruntime and numpy. Exits 1 when
# any stage fails; prints one summary line per config at the end.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:?usage: onnx_check.sh BIN_DIR OUT_DIR [CONFIGS]}
out=${2:?usage: onnx_check.sh BIN_DIR OUT_DIR [CONFIGS]}
configs=${3:-resnet9 resnet9_groupnorm resnet9_layernorm}
mkdir -p "$out"
export LD_LIBRARY_PATH="$root/.devshare/lib:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1
data=/tmp/cifar10
[ -f "$data/test_batch.bin" ] || bash "$root/.devshare/tools/prepare-cifar10.sh" "$data" >/dev/null
failed=()
summary=()
for cfg in $configs; do
  run=$out/$cfg
  rm -rf "$run"
  if "$bin/minidl" train --config "$root/configs/$cfg.json" --device cuda --set data.dir=$data --output "$run" \
       > "$out/$cfg.train.log" 2>&1 &&
     "$bin/minidl" export --run "$run" --onnx "$out/$cfg.onnx" --logits "$out/$cfg.cuda.ref" --device cuda --data-dir $data &&
     "$bin/minidl" export --run "$run" --onnx "$out/$cfg.onnx" --logits "$out/$cfg.cpu.ref" --device cpu --data-dir $data &&
     python3 "$root/scripts/gpu/onnx_check.py" "$out/$cfg.onnx" --gpu-ref "$out/$cfg.cuda.ref" \
       --cpu-ref "$out/$cfg.cpu.ref" --metrics "$run/metrics.jsonl" | tee "$out/$cfg.check.log"; then
    summary+=("$cfg: $(tail -1 "$out/$cfg.check.log")")
  else
    failed+=("$cfg")
    summary+=("$cfg: FAILED (logs in $out)")
    tail -3 "$out/$cfg.train.log"
  fi
done
echo "== onnx_check.sh summary"
printf '%s\n' "${summary[@]}"
[ ${#failed[@]} -eq 0 ] || { echo "onnx_check.sh: failed: ${failed[*]}"; exit 1; }
