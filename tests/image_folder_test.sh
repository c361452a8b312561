#!/usr/bin/env bash
# ctest image_folder: `minidl train` from image folders, as a user runs it.
#   1. configs/quick_cpu.json from the CIFAR-10 JPEG subset (scripts/data_jpeg.sh: 2,000 training
#      and 1,000 test images) with one config change, one epoch: classes.json, the per-class
#      accuracy and confusion matrix in summary.json, the decode note; a second run reads the cache.
#   2. A small folder of two classes with a corrupt file: one clear error naming the file, the model
#      head's width checked against the class count, and skip_bad.
#   3. The exported ONNX model carries the class list (when python3-onnx is there).
#   tests/image_folder_test.sh MINIDL PYTHON3 SOURCE_DIR JPEG_DIR
# Exit 4 (ctest: skipped) without the JPEG subset.
set -euo pipefail
minidl=$1 python=$2 src=$3 jpeg=$4
if [ ! -d "$jpeg/train" ]; then
  echo "SKIPPED: no JPEG subset at $jpeg (scripts/data_jpeg.sh makes it from ../shared/data/cifar10-jpeg.tar.xz)"
  exit 4
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
folder=(--set data.format=image_folder --set data.dir="$jpeg" --set data.image_size=32 --set data.cache_dir="$work/cache")
"$minidl" train --config "$src/configs/quick_cpu.json" "${folder[@]}" --set epochs=1 --output "$work/run" >"$work/out1"
grep -q "data: training images: 2000 from .*(10 classes, 32x32, decoded in" "$work/out1" || { cat "$work/out1"; echo "FAIL: no decode note"; exit 1; }
grep -q "per-class test accuracy (flip TTA): airplane" "$work/out1" || { echo "FAIL: no per-class line"; exit 1; }
"$minidl" train --config "$src/configs/quick_cpu.json" "${folder[@]}" --set epochs=1 --max-steps 2 --output "$work/run" --overwrite >"$work/out2"
grep -q "data: training images: 2000 from .*read from the cache" "$work/out2" || { cat "$work/out2"; echo "FAIL: cache not read"; exit 1; }
"$python" - "$work/run" <<'PY'
import json, sys
run = sys.argv[1]
classes = json.load(open(f"{run}/classes.json"))
assert classes == ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"], classes
s = json.load(open(f"{run}/summary.json"))
assert s["classes"] == classes and len(s["per_class_acc"]) == 10
conf = s["confusion"]
assert len(conf) == 10 and all(len(r) == 10 for r in conf)
assert [sum(r) for r in conf] == [100] * 10, conf                      # 100 test images per class
correct = sum(conf[i][i] for i in range(10))
assert abs(100.0 * correct / 1000 - s["test_acc_tta"]) < 1e-9, (correct, s["test_acc_tta"])
assert all(abs(a - conf[i][i]) < 1e-9 for i, a in enumerate(s["per_class_acc"]))
print(f"image_folder: quick_cpu from the JPEG subset, 1 epoch: {s['test_acc_tta']:.1f}% (flip TTA)")
PY

# A folder of two classes, one file corrupt.
small=$work/small
for c in airplane ship; do
  mkdir -p "$small/train/$c" "$small/test/$c"
  ls "$jpeg/train/$c" | head -40 | while read -r f; do cp "$jpeg/train/$c/$f" "$small/train/$c/"; done
  ls "$jpeg/test/$c" | head -10 | while read -r f; do cp "$jpeg/test/$c/$f" "$small/test/$c/"; done
done
head -c 300 "$jpeg/train/ship/0000.jpg" >"$small/train/ship/zz_truncated.jpg"
two=(--set data.format=image_folder --set data.dir="$small" --set data.image_size=32 --set epochs=1 --set batch_size=16)
if "$minidl" train --config "$src/configs/quick_cpu.json" "${two[@]}" --output "$work/bad" 2>"$work/err"; then
  echo "FAIL: a corrupt file was accepted"; exit 1
fi
grep -q "minidl: error: image folder: '.*zz_truncated.jpg': .*skip_bad" "$work/err" || { cat "$work/err"; exit 1; }
[ ! -e "$work/bad" ] || { echo "FAIL: a refused run left $work/bad"; exit 1; }
if "$minidl" train --config "$src/configs/quick_cpu.json" "${two[@]}" --set data.skip_bad=true --output "$work/bad" 2>"$work/err"; then
  echo "FAIL: a 10-way head on 2 classes was accepted"; exit 1
fi
grep -q "the model's output has 10 values per image, but the data (image_folder) has 2 classes" "$work/err" || { cat "$work/err"; exit 1; }
"$minidl" train --config "$src/configs/quick_cpu.json" "${two[@]}" --set data.skip_bad=true \
  --set model.layers.10.out_features=2 --output "$work/two" >"$work/out3"
grep -q "skipped 1 files that do not decode (skip_bad), e.g. .*zz_truncated.jpg" "$work/out3" || { cat "$work/out3"; exit 1; }
[ "$(cat "$work/two/classes.json")" = '["airplane","ship"]' ] || { echo "FAIL: classes.json"; exit 1; }

if "$python" -c "import onnx" 2>/dev/null; then
  "$minidl" export --run "$work/two" --onnx "$work/two.onnx" >/dev/null
  "$python" - "$work/two.onnx" <<'PY'
import json, onnx, sys
meta = {p.key: p.value for p in onnx.load(sys.argv[1]).metadata_props}
assert json.loads(meta["minidl.classes"]) == ["airplane", "ship"], meta
PY
fi
echo "image_folder: OK"
