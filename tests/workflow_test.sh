#!/usr/bin/env bash
# ctest workflow: the everyday loop on the CPU, as docs/guide.md walks it, on a 3-class folder of
# PNG images made here (tests/png_folder.py):
#   1. train a tiny config with a validation split held out (data.val_fraction), the best epoch's
#      weights kept (checkpoint.save_best) and early stopping, which ends it before its 30 epochs;
#      classes.json holds the folder's classes;
#   2. fine-tune from it with init_from and a new 2-class head (skip), the loaded tensors' values
#      checked; the shape mismatch without skip refused, naming the tensor;
#   3. predict three PNGs of other sizes: the right class names, as text and JSON;
#   4. eval the run: on the validation split its accuracy, TTA accuracy and loss equal the last
#      epoch's evaluation, bit for bit; on the test split those of the test pass at the run's end;
#      with --weights best those of the best epoch's test pass; with selective TTA and equal view
#      weights (eval.tta_share, eval.tta_weights) eval follows the run's; --split train counts the
#      training images less the hold-out;
#   5. a safetensors file laid out as PyTorch writes it (a DDP "module." prefix, I64
#      num_batches_tracked counters, format "pt") loads by name through init_from.map, and the run
#      resumes without it;
#   6. bad input: a missing run, a corrupt image, an image of 0 bytes, a FIFO, a 10000x10000 image
#      (predicted) and one past the pixel limit, weights and init_from files of another model, a
#      misspelt key: one clear message naming it, a non-zero exit, and the run folder unchanged;
#      a copy with config.json edited or best.safetensors damaged is refused by eval and predict.
#   tests/workflow_test.sh MINIDL PYTHON3 SOURCE_DIR
set -euo pipefail
minidl=$1 python=$2 src=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# expect_error WHAT PATTERN -- COMMAND...: the command fails with one line matching PATTERN.
expect_error() {
  local what=$1 pattern=$2
  shift 3
  if "$@" >"$work/out" 2>"$work/err"; then fail "$what was accepted"; fi
  grep -q -- "$pattern" "$work/err" || { cat "$work/out" "$work/err"; fail "$what: no message matching '$pattern'"; }
}

"$python" "$src/tests/png_folder.py" folder "$work/colours" red green blue
"$python" "$src/tests/png_folder.py" folder "$work/two" red blue
for c in red green blue; do "$python" "$src/tests/png_folder.py" image "$work/$c.png" "$c" 37 29; done
cat >"$work/tiny.json" <<EOF
{
  "seed": 1, "device": "cpu", "epochs": 30, "batch_size": 20,
  "data": {"format": "image_folder", "dir": "$work/colours", "image_size": 16, "val_fraction": 0.2,
           "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]},
  "checkpoint": {"save_best": true, "monitor": "val_acc"},
  "early_stopping": {"monitor": "val_acc", "patience": 2},
  "model": {"layers": [
    {"type": "Conv2d", "in_channels": 3, "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": false},
    {"type": "BatchNorm2d", "num_features": 8, "relu": true},
    {"type": "GlobalAvgPool2d"},
    {"type": "Linear", "in_features": 8, "out_features": 3}]},
  "optimizer": {"type": "SGD", "lr": 0.1, "momentum": 0.9},
  "eval": {"tta": "flip", "batch_size": 7},
  "output": {"dir": "$work/runs/colours"}
}
EOF

# 1. Train.
"$minidl" train --config "$work/tiny.json" >"$work/train.out"
run=$work/runs/colours
grep -q '^\["blue","green","red"\]$' "$run/classes.json" || fail "classes.json: $(cat "$run/classes.json")"
grep -q "early stopping: val_acc has not improved by more than 0 for 2 epochs" "$work/train.out" ||
  { cat "$work/train.out"; fail "the run did not stop early"; }
[ -f "$run/best.safetensors" ] || fail "no best.safetensors"

# 2. Fine-tune with a new head: the file's 3-class head is skipped, everything else loaded.
finetune=(--config "$work/tiny.json" --set data.dir="$work/two" --set model.layers.3.out_features=2
          --set init_from.path="$run")
expect_error "init_from with a head of another shape" \
  "init_from '$run/model.safetensors': tensor '3.weight' is (3, 8) in the file but (2, 8) in the model; add '3.weight' to init_from.skip" \
  -- "$minidl" train "${finetune[@]}" --output "$work/runs/refused"
[ ! -e "$work/runs/refused" ] || fail "a refused init_from left a run folder"
"$minidl" train "${finetune[@]}" --set 'init_from.skip=["3.*"]' --set optimizer.lr=0 --max-steps 1 \
  --output "$work/runs/finetune" >"$work/finetune.out"
grep -q "init_from $run/model.safetensors: loaded 5 tensors (248 values); skipped 2 (3.weight, 3.bias), initialized from the seed" \
  "$work/finetune.out" || { cat "$work/finetune.out"; fail "no init_from report"; }
grep -q "parameters: 250 trainable, 0 frozen at the first step" "$work/finetune.out" || fail "no parameter counts"

# 3. Predict.
"$minidl" predict --run "$run" "$work/red.png" "$work/green.png" "$work/blue.png" --top-k 2 >"$work/predict.out"
for c in red green blue; do
  grep -q "^$work/$c.png: $c [0-9.]*%, " "$work/predict.out" || { cat "$work/predict.out"; fail "predict: $c.png"; }
done
"$minidl" predict --run "$run" "$work/red.png" "$work/blue.png" --json --tta none >"$work/predict.json"

# 4. Eval: the validation split, the test split, the best epoch's weights.
"$minidl" eval --run "$run" --split val --output "$work/eval_val.json" >"$work/eval.out"
"$minidl" eval --run "$run" --weights best --output "$work/eval_best.json" >>"$work/eval.out"
"$minidl" eval --run "$run" >>"$work/eval.out"
"$minidl" eval --run "$run" --split train --output "$work/eval_train.json" >>"$work/eval.out"
grep -q "^accuracy .* with flip TTA" "$work/eval.out" || { cat "$work/eval.out"; fail "eval printed no accuracy"; }

# Selective TTA with equal weights (eval.tta_share, eval.tta_weights): eval follows the run's.
"$minidl" train --config "$work/tiny.json" --set epochs=1 --set optimizer.lr=0.02 --set eval.tta_share=0.5 \
  --set eval.tta_weights=equal --output "$work/runs/selective" >/dev/null
"$minidl" eval --run "$work/runs/selective" --output "$work/eval_selective.json" >/dev/null

"$python" - "$work" "$run" <<'PY'
import json, os, struct, sys
work, run = sys.argv[1], sys.argv[2]

def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    return {k: raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in header.items()}, header

# 2: the loaded tensors are the run's, bit for bit (lr 0: one step changes no weight; BatchNorm's
# running statistics move, and are not compared).
a, _ = tensors(f"{run}/model.safetensors")
b, _ = tensors(f"{work}/runs/finetune/model.safetensors")
for name in ("0.weight", "1.weight", "1.bias"):
    assert a[name] == b[name], name
assert len(b["3.weight"]) == 2 * 8 * 4 and b["3.weight"] != a["3.weight"][:64]

# 3: JSON predictions.
p = json.load(open(f"{work}/predict.json"))
assert [x["top"][0]["class"] for x in p] == ["red", "blue"], p
assert all(abs(sum(t["probability"] for t in x["top"]) - 1) < 1e-6 for x in p), p

# 4: eval = the last epoch's evaluation (the validation split), the run's final test pass, and the
# best epoch's test pass; eval.json's figures agree with themselves.
records = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
assert len(records) < 30, "early stopping did not stop the run"
last = records[-1]
v = json.load(open(f"{work}/eval_val.json"))
assert v["images"] == 24 and v["split"] == "val", v
trained = sum(len(files) for _, _, files in os.walk(f"{work}/colours/train"))
t = json.load(open(f"{work}/eval_train.json"))
assert t["images"] == trained - 24 and t["split"] == "train", (t["images"], trained)  # the hold-out left out
assert (v["accuracy"], v["accuracy_tta"], v["loss"]) == (last["val_acc"], last["val_acc_tta"], last["val_loss"]), (v, last)
e = json.load(open(f"{run}/eval.json"))
assert e["accuracy"] == last["test_acc"] and e["accuracy_tta"] == last["test_acc_tta"], (e, last)
best = json.load(open(f"{run}/summary.json"))["best"]
b = json.load(open(f"{work}/eval_best.json"))
assert b["weights"].endswith("best.safetensors") and b["accuracy"] == best["test_acc"], (b, best)
assert e["images"] == 30 and e["support"] == [10, 10, 10] and e["classes"] == ["blue", "green", "red"], e
conf = e["confusion"]
assert abs(100.0 * sum(conf[i][i] for i in range(3)) / 30 - e["accuracy_tta"]) < 1e-9
assert e["top5_accuracy"] == 100.0 and e["top_k"] == 3
sel_last = [json.loads(l) for l in open(f"{work}/runs/selective/metrics.jsonl")][-1]
sel = json.load(open(f"{work}/eval_selective.json"))
assert (sel["accuracy"], sel["accuracy_tta"]) == (sel_last["test_acc"], sel_last["test_acc_tta"]), (sel, sel_last)
print(f"workflow: stopped early after {len(records)} epochs at {last['val_acc']:.1f}% validation and "
      f"{last['test_acc']:.1f}% test accuracy; eval agrees")

# 5: the run's weights as PyTorch writes a DDP model's state dict: "module." names, I64
# num_batches_tracked, F32 tensors ordered by name, metadata {"format": "pt"}.
_, header = tensors(f"{run}/model.safetensors")
items = {"module." + k: (v["dtype"], v["shape"], a[k]) for k, v in header.items()}
items["module.1.num_batches_tracked"] = ("I64", [], struct.pack("<q", 54))
meta, data, at = {"__metadata__": {"format": "pt"}}, b"", 0
for name in sorted(items):
    dtype, shape, raw = items[name]
    meta[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(raw)]}
    data += raw
    at += len(raw)
text = json.dumps(meta).encode()
text += b" " * (-len(text) % 8)
open(f"{work}/torch_layout.safetensors", "wb").write(struct.pack("<Q", len(text)) + text + data)
PY

# 5. PyTorch's layout, by name through init_from.map.
"$minidl" train --config "$work/tiny.json" --set init_from.path="$work/torch_layout.safetensors" \
  --set 'init_from.map={"module": ""}' --set optimizer.lr=0 --max-steps 1 --output "$work/runs/torch" >"$work/torch.out"
grep -q "init_from $work/torch_layout.safetensors: loaded 7 tensors (275 values)$" "$work/torch.out" ||
  { cat "$work/torch.out"; fail "the PyTorch-layout file did not load by name"; }
grep -q "not used from the file: 1 num_batches_tracked counters" "$work/torch.out" || fail "num_batches_tracked not reported"
# A resumed run takes its weights from its checkpoint: the init_from file is not read again.
mv "$work/torch_layout.safetensors" "$work/torch_layout.moved"
"$minidl" train --resume "$work/runs/torch" --max-steps 2 >"$work/resume.out" || { cat "$work/resume.out"; fail "resume needed the init_from file"; }
mv "$work/torch_layout.moved" "$work/torch_layout.safetensors"
expect_error "PyTorch names without the map" "none of its 8 tensors (module.0.weight, " \
  -- "$minidl" train --config "$work/tiny.json" --set init_from.path="$work/torch_layout.safetensors" \
  --output "$work/runs/refused"

# 6. Bad input, the run folder checked unchanged afterwards.
before=$(cd "$run" && find . -type f -exec sha256sum {} + | sort)
expect_error "a missing run" "minidl: error: --run '$work/nope': no such folder" -- "$minidl" predict --run "$work/nope" "$work/red.png"
expect_error "eval of a missing run" "minidl: error: --run '$work/nope': no such folder" -- "$minidl" eval --run "$work/nope"
head -c 2000 /dev/urandom >"$work/corrupt.png"
head -c 500 "$work/red.png" >"$work/truncated.png"
: >"$work/empty.png"
mkfifo "$work/fifo.png"
expect_error "a corrupt image" "predict: '$work/corrupt.png': neither JPEG nor PNG (unknown signature)" \
  -- "$minidl" predict --run "$run" "$work/red.png" "$work/corrupt.png"
expect_error "a truncated PNG" "predict: '$work/truncated.png': PNG does not decode" \
  -- "$minidl" predict --run "$run" "$work/truncated.png"
expect_error "an image of 0 bytes" "predict: '$work/empty.png': neither JPEG nor PNG (an empty file)" \
  -- "$minidl" predict --run "$run" "$work/empty.png"
expect_error "a FIFO" "predict: '$work/fifo.png': not a regular file" -- "$minidl" predict --run "$run" "$work/fifo.png"
expect_error "a folder" "predict: '$work/colours': a folder, not an image file" -- "$minidl" predict --run "$run" "$work/colours"
expect_error "a missing image" "predict: '$work/gone.png': cannot open (No such file or directory)" \
  -- "$minidl" predict --run "$run" "$work/gone.png"
"$python" "$src/tests/png_folder.py" huge "$work/huge.png" 10000 10000
"$minidl" predict --run "$run" "$work/huge.png" --top-k 1 >"$work/huge.out" || fail "a 10000x10000 PNG was refused"
grep -q "^$work/huge.png: [a-z]* [0-9.]*%$" "$work/huge.out" || { cat "$work/huge.out"; fail "no prediction for the 10000x10000 PNG"; }
"$python" "$src/tests/png_folder.py" header "$work/too_large.png" 20000 20000
expect_error "an image past the pixel limit" \
  "predict: '$work/too_large.png': PNG does not decode (20000x20000 pixels of 1 channels: at most 2^28 pixels are read)" \
  -- "$minidl" predict --run "$run" "$work/too_large.png"
expect_error "--weights best without a best epoch" "--weights best: '$work/runs/torch' has no best.safetensors" \
  -- "$minidl" eval --run "$work/runs/torch" --weights best
expect_error "weights of another model" "minidl: error: '$work/runs/finetune/model.safetensors' does not hold this run's model" \
  -- "$minidl" eval --run "$run" --weights "$work/runs/finetune/model.safetensors"
expect_error "init_from a file of another model" "init_from '$work/runs/finetune/model.safetensors': tensor '3.weight' is (2, 8)" \
  -- "$minidl" train --config "$work/tiny.json" --set init_from.path="$work/runs/finetune/model.safetensors" \
  --output "$run" --overwrite
expect_error "init_from a missing file" "init_from.path: '$work/gone.safetensors' does not exist" \
  -- "$minidl" train --config "$work/tiny.json" --set init_from.path="$work/gone.safetensors" --output "$run" --overwrite
expect_error "init_from a corrupt file" "init_from.path: safetensors file '$work/corrupt.png'" \
  -- "$minidl" train --config "$work/tiny.json" --set init_from.path="$work/corrupt.png" --output "$run" --overwrite
expect_error "a misspelt init_from key" "init_from.strct: unknown key (did you mean 'strict'?)" \
  -- "$minidl" train --config "$work/tiny.json" --set init_from.path="$run" --set init_from.strct=false --output "$run" --overwrite
expect_error "init_from.skip without a path" "init_from: skip, map and strict go with init_from.path" \
  -- "$minidl" train --config "$work/tiny.json" --set 'init_from.skip=["3.*"]' --output "$run" --overwrite
after=$(cd "$run" && find . -type f -exec sha256sum {} + | sort)
[ "$before" == "$after" ] || fail "bad input changed the run folder"
# A copy of the run with config.json edited (another image size) or best.safetensors damaged: eval
# and predict refuse it, naming the file.
cp -r "$run" "$work/edited"
"$python" - "$work/edited/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["data"]["image_size"] = 24
json.dump(c, open(sys.argv[1], "w"), indent=2)
PY
expect_error "eval of an edited config.json" "config.json' does not describe the model the run trained" \
  -- "$minidl" eval --run "$work/edited"
cp "$run/config.json" "$work/edited/config.json"
"$python" - "$work/edited/best.safetensors" <<'PY'
import sys
raw = bytearray(open(sys.argv[1], "rb").read())
raw[-1] ^= 0x40  # one bit of the last tensor
open(sys.argv[1], "wb").write(raw)
PY
expect_error "predict with damaged best weights" "best.safetensors' is damaged: its tensors' CRC-32" \
  -- "$minidl" predict --run "$work/edited" --weights best "$work/red.png"
echo "workflow: ok"
