#!/usr/bin/env bash
# ctest onnx_export: every model config and every layer type's examples (`minidl export --examples`)
# export, python3-onnx's checker accepts the file, and a float64 numpy evaluator of the graph
# (scripts/onnx/onnx_eval.py) gives minidl's eval outputs, and so does onnxruntime for the
# tests/onnx models where python3 imports it (a SKIPPED line otherwise).
#   tests/onnx_export_test.sh MINIDL PYTHON3 SOURCE_DIR DATA_DIR
# tests/onnx/*.json (every layer type, options included) are trained for one short epoch first,
# so BatchNorm's running statistics are real, then exported with --run; configs/*.json are
# exported with --config (initialised weights). Exit 4 (ctest: skipped) without python3-onnx or
# the data.
set -euo pipefail
minidl=$1 python=$2 src=$3 data=$4
source "$src/tests/script_checks.sh"
require_python_modules "$python" onnx,numpy "python3-onnx python3-numpy"
require_data "$data"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for cfg in "$src"/tests/onnx/*.json; do
  name=$(basename "$cfg" .json)
  "$minidl" train --config "$cfg" --set data.dir="$data" --output "$work/$name" >/dev/null
  "$minidl" export --run "$work/$name" --onnx "$work/$name.onnx" --logits "$work/$name.ref" --limit 64
  "$python" "$src/scripts/onnx/onnx_eval.py" "$work/$name.onnx" --logits "$work/$name.ref"
  if "$python" -c "import onnxruntime" 2>/dev/null; then
    "$python" - "$src/scripts/onnx" "$work/$name.onnx" "$work/$name.ref" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import onnxruntime as ort
from reference import compare, read_safetensors
ref, _ = read_safetensors(sys.argv[3])
got = ort.InferenceSession(sys.argv[2], providers=["CPUExecutionProvider"]).run(None, {"input": ref["images"]})[0]
sys.exit(0 if compare("onnxruntime vs minidl", got, ref["logits"], ref["labels"], 1e-4, 1e-4) else 1)
PY
  else
    echo "$name: onnxruntime SKIPPED: $python cannot import onnxruntime (pip install onnxruntime)"
  fi
done
# Every example of every exportable layer type (the specs the op harness and parity.py run), each
# as a model of its own, against minidl's eval-mode output.
"$minidl" export --examples "$work/examples"
for model in "$work"/examples/*.onnx; do
  "$python" "$src/scripts/onnx/onnx_eval.py" "$model" --outputs "${model%.onnx}.safetensors"
done
for cfg in "$src"/configs/*.json; do
  name=$(basename "$cfg" .json)
  # The test data is CIFAR-10: a config of another data set is exported by the tests of its loader.
  grep -q '"format": *"cifar10"' "$cfg" || ! grep -q '"format"' "$cfg" || continue
  "$minidl" export --config "$cfg" --onnx "$work/$name.onnx" --logits "$work/$name.ref" --limit 4 --data-dir "$data"
  "$python" "$src/scripts/onnx/onnx_eval.py" "$work/$name.onnx" --logits "$work/$name.ref"
done
# A layer that cannot export: one clear message naming it, and a non-zero exit.
if "$minidl" export --config "$src/tests/onnx/all_layers_b.json" --set model.layers.7.start_dim=2 \
    --onnx "$work/bad.onnx" 2> "$work/bad.err"; then
  echo "FAIL: a Flatten(start_dim=2) exported"
  exit 1
fi
grep -q "Flatten(start_dim=2, end_dim=-1) has no ONNX export" "$work/bad.err" || { cat "$work/bad.err"; exit 1; }
cat "$work/bad.err"
# --logits of a run that read CIFAR-10 from $CIFAR10_DIR (data.dir empty) finds it there as training
# did; with neither, one message and no .onnx file left behind.
first=$(ls "$src"/tests/onnx/*.json | head -1)
CIFAR10_DIR="$data" "$minidl" train --config "$first" --set data.dir= --output "$work/env_run" >/dev/null
CIFAR10_DIR="$data" "$minidl" export --run "$work/env_run" --onnx "$work/env.onnx" --logits "$work/env.ref" --limit 8
"$python" "$src/scripts/onnx/onnx_eval.py" "$work/env.onnx" --logits "$work/env.ref"
if CIFAR10_DIR= "$minidl" export --run "$work/env_run" --onnx "$work/none.onnx" --logits "$work/none.ref" 2> "$work/none.err"; then
  echo "FAIL: export --logits without a data folder succeeded"
  exit 1
fi
grep -q "export --logits: data.dir: no CIFAR-10 folder given" "$work/none.err" || { cat "$work/none.err"; exit 1; }
[ ! -e "$work/none.onnx" ] || { echo "FAIL: a failed export --logits left $work/none.onnx behind"; exit 1; }
echo "onnx_export: ok"
