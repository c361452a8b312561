#!/usr/bin/env bash
# The bad-input suite (docs/reliability.md): every hostile or careless input found so
# far, run through the real `minidl train` command. Each refused case must exit non-zero (never
# by a signal), print one line "minidl: error: ..." of printable ASCII naming the problem, and
# leave the run folder byte for byte as it was. Interrupted runs must stop at a step boundary
# with a checkpoint, exit 130 (SIGINT) or 143 (SIGTERM), and resume.
# usage: scripts/bad_input.sh MINIDL_BINARY CIFAR10_DIR
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
minidl=$(realpath "${1:?usage: bad_input.sh MINIDL_BINARY CIFAR10_DIR}")
data=${2:?usage: bad_input.sh MINIDL_BINARY CIFAR10_DIR}
work=$(mktemp -d /tmp/minidl_bad_input.XXXXXX)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0

fail() { echo "FAIL: $*"; failed=$((failed + 1)); }

# A hash of every file (name and bytes) under a folder; "absent" when it does not exist.
snapshot() {
  [ -d "$1" ] || { echo absent; return; }
  (cd "$1" && find . -type f -print0 | sort -z | xargs -0 -r sha256sum | sha256sum)
}

# expect_error NAME PATTERN WATCHED_DIR -- COMMAND...
expect_error() {
  local name=$1 pattern=$2 dir=$3
  shift 4
  local before rc lines
  before=$(snapshot "$dir")
  timeout 120 "$@" >"$work/out" 2>"$work/err"
  rc=$?
  lines=$(wc -l <"$work/err")
  if [ "$rc" -eq 0 ] || [ "$rc" -ge 124 ]; then
    fail "$name: exit code $rc (expected an error exit, not success, a timeout or a signal)"
  elif [ "$lines" -ne 1 ]; then
    fail "$name: $lines lines on stderr (expected one):"; head -5 "$work/err"
  elif LC_ALL=C grep -q '[^ -~]' "$work/err"; then
    fail "$name: non-printable bytes in the message"
  elif ! grep -q "^minidl: error: " "$work/err" || grep -q "unexpected error" "$work/err"; then
    fail "$name: not a minidl error: $(cat "$work/err")"
  elif ! grep -qE -- "$pattern" "$work/err"; then
    fail "$name: message does not match /$pattern/: $(cat "$work/err")"
  elif [ "$(snapshot "$dir")" != "$before" ]; then
    fail "$name: the folder $dir changed"
  else
    passed=$((passed + 1))
    echo "ok   $name: $(cut -c1-150 "$work/err")"
  fi
}

expect_rc() {  # expect_rc NAME EXPECTED_RC COMMAND...
  local name=$1 want=$2
  shift 2
  timeout 600 "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  if [ "$rc" -ne "$want" ]; then
    fail "$name: exit code $rc, expected $want"; tail -3 "$work/err"
  else
    passed=$((passed + 1)); echo "ok   $name: exit $rc"
  fi
}

nested() {  # nested DEPTH OPEN CLOSE INNER
  python3 -c "import sys; d=int(sys.argv[1]); sys.stdout.write(sys.argv[2]*d + sys.argv[4] + sys.argv[3]*d)" "$@"
}

# Rewrites one metadata value of a safetensors file (tensors kept), as a hand-made file would
# have it: without the metadata's checksum (read as a file written before it existed), so the
# value itself is what is checked; with "keep-crc", the checksum stays and no longer matches.
set_metadata() {  # set_metadata FILE KEY VALUE_FILE [keep-crc]
  python3 - "$@" <<'PY'
import json, struct, sys
path, key, value_file = sys.argv[1:4]
raw = open(path, 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
header = json.loads(raw[8:8 + n])
header['__metadata__'][key] = open(value_file).read()
if sys.argv[4:] != ['keep-crc']:
    header['__metadata__'].pop('metadata_crc32', None)
text = json.dumps(header).encode()
text += b' ' * ((8 - len(text) % 8) % 8)
open(path, 'wb').write(struct.pack('<Q', len(text)) + text + raw[8 + n:])
PY
}

train=("$minidl" train)
small=(--set "data.dir=$data" --set data.train_limit=512 --set epochs=1 --set output.progress=false)
run="$work/run"

echo "bad_input: making a finished run to attack"
expect_rc "setup: a 1-epoch run" 0 "${train[@]}" --config "$root/configs/quick_cpu.json" "${small[@]}" --output "$run"
cp "$run/checkpoint.safetensors" "$work/good.safetensors"
restore() { cp "$work/good.safetensors" "$run/checkpoint.safetensors"; }

# 1. Deep nesting: config, --set value, checkpoint config.
python3 - "$work" "$root/configs/quick_cpu.json" <<'PY'
import json, sys
w = sys.argv[1]
base = json.load(open(sys.argv[2]))
text = json.dumps(base)
open(w + '/deep_mean.json', 'w').write(text[:-1] + ', "data": {"mean": ' + '[' * 100000 + '1' + ']' * 100000 + '}}')
open(w + '/deep_layer.json', 'w').write('{"model": {"layers": [' + '{"a":' * 1000000 + '1' + '}' * 1000000 + ']}}')
PY
expect_error "1 deep data.mean" "nested more than 64" "$run" -- "${train[@]}" --config "$work/deep_mean.json" --output "$work/x"
expect_error "1 deep layer" "nested more than 64" "$run" -- "${train[@]}" --config "$work/deep_layer.json" --output "$work/x"
# (60k levels: one argument may hold at most 128 KiB)
expect_error "1 deep --set" "nested more than 64" "$run" -- "${train[@]}" --config "$root/configs/quick_cpu.json" \
  --set "data.mean=$(nested 60000 '[' ']' 1)" --output "$work/x"
nested 100000 '[' ']' 1 >"$work/deep_value"
set_metadata "$run/checkpoint.safetensors" config "$work/deep_value"
expect_error "1 deep checkpoint config" "nested more than 64" "$run" -- "${train[@]}" --resume "$run" --set epochs=2
restore
printf '7' >"$work/value"
set_metadata "$run/checkpoint.safetensors" step "$work/value" keep-crc
expect_error "1 checkpoint metadata edited" "is damaged: its metadata's CRC-32 is" "$run" -- "${train[@]}" --resume "$run" \
  --set epochs=2
restore

# 2. A finished run.
expect_error "2 resume a finished run" "the run is finished.*--set epochs=N" "$run" -- "${train[@]}" --resume "$run"

# 4. --resume with --config / --set / --output.
expect_error "4 resume --config" "--config cannot be combined with --resume" "$run" -- \
  "${train[@]}" --resume "$run" --config "$root/configs/quick_cpu.json"
expect_error "4 resume --output" "--output cannot be combined with --resume" "$run" -- \
  "${train[@]}" --resume "$run" --output "$work/y"
expect_error "4 resume --set lr" "--set optimizer.lr=... cannot change" "$run" -- \
  "${train[@]}" --resume "$run" --set optimizer.lr=1

# 5. Sizes: a huge layer fails before allocating, /dev/zero and folders are not configs.
start=$(date +%s)
expect_error "5 out_channels 1e8" "model.layers\[0\]: a weight of shape \(100000000" "$run" -- \
  "${train[@]}" --config "$root/configs/quick_cpu.json" "${small[@]}" --set model.layers.0.out_channels=100000000 --output "$work/x"
[ $(( $(date +%s) - start )) -le 30 ] || fail "5 out_channels 1e8: took more than 30 s"
expect_error "5 --config /dev/zero" "not a regular file" "$run" -- "${train[@]}" --config /dev/zero --output "$work/x"
expect_error "5 --config a folder" "is a directory" "$run" -- "${train[@]}" --config "$work" --output "$work/x"

# 6. Parseable but invalid checkpoint metadata: refused before any log is touched.
for kv in "epoch=-5" "step=-100" "epoch=1xyz" "step=3" "config=[1,2]"; do
  printf '%s' "${kv#*=}" >"$work/value"
  set_metadata "$run/checkpoint.safetensors" "${kv%%=*}" "$work/value"
  expect_error "6 checkpoint ${kv}" "checkpoint '.*checkpoint.safetensors'" "$run" -- "${train[@]}" --resume "$run" --set epochs=2
  restore
done
printf '\x30\x00\x00\x00\x00\x00\x00\x00\x01\x02\xff\xfe garbage header \x1b[31m red \x00\x00 and more bytes....' \
  >"$run/checkpoint.safetensors"
expect_error "8 garbage safetensors header" "header is not a JSON object" "$run" -- "${train[@]}" --resume "$run" --set epochs=2
restore

# 11. Precision: unknown values, a loss scaler where none belongs, a gradient clip of 0, a
# checkpoint's loss-scaler state that does not fit the run.
expect_error "11 precision fp8" 'precision: expected "auto", "fp32", "bf16" or "fp16", got "fp8"' "$run" -- \
  "${train[@]}" --config "$root/configs/quick_cpu.json" "${small[@]}" --set precision=fp8 --output "$work/x"
expect_error "11 memory_format nhwc" 'memory_format: expected "auto", "contiguous" or "channels_last", got "nhwc"' "$run" -- \
  "${train[@]}" --config "$root/configs/quick_cpu.json" "${small[@]}" --set memory_format=nhwc --output "$work/x"
expect_error "11 grad_scaler in bf16" 'grad_scaler: loss scaling is for precision "fp16" only' "$run" -- \
  "${train[@]}" --config "$root/configs/quick_cpu.json" "${small[@]}" --set precision=bf16 \
  --set grad_scaler.init_scale=1024 --output "$work/x"
expect_error "11 grad_scaler init_scale -1" "grad_scaler.init_scale: expected a normal positive float32 value" "$run" -- \
  "${train[@]}" --config "$root/configs/quick_cpu.json" "${small[@]}" --set precision=fp16 \
  --set grad_scaler.init_scale=-1 --output "$work/x"
expect_error "11 grad_clip 0" "grad_clip: expected a number > 0 \\(leave the key out for no clipping\\), got 0" "$run" -- \
  "${train[@]}" --config "$root/configs/quick_cpu.json" "${small[@]}" --set grad_clip=0 --output "$work/x"
printf '{"scale": 1024, "growth_tracker": 0, "skipped_steps": 0}' >"$work/value"
set_metadata "$run/checkpoint.safetensors" grad_scaler "$work/value"
expect_error "11 checkpoint grad_scaler in an fp32 run" "holds loss-scaler state but this run's precision" "$run" -- \
  "${train[@]}" --resume "$run" --set epochs=2
restore

# 7. Sizes that would overflow.
expect_error "7 Conv2d out_channels 2^62" "expected an integer in 1\.\.2147483648" "$run" -- "${train[@]}" --config "$root/configs/quick_cpu.json" \
  "${small[@]}" --set model.layers.0.out_channels=4611686018427387904 --output "$work/x"
expect_error "7 epochs near INT64_MAX" "epochs: expected a number in \\(0, 1000000\\], got" "$run" -- \
  "${train[@]}" --config "$root/configs/quick_cpu.json" --set epochs=9223372036854775807 --output "$work/x"

# 8. Library exceptions become messages naming the file and key.
printf '{"optimizer": {"type": "SGD", "lr": 1e999}}' >"$work/lr.json"
expect_error "8 lr 1e999" "lr.json' is not valid JSON: number overflow" "$run" -- "${train[@]}" --config "$work/lr.json" --output "$work/x"
expect_error "8 list index 1e23" "past the end of the list" "$run" -- "${train[@]}" --config "$root/configs/quick_cpu.json" \
  --set model.layers.99999999999999999999999=1 --output "$work/x"
mkdir -p "$work/data_dir"
for f in "$data"/*; do ln -s "$f" "$work/data_dir/"; done
rm "$work/data_dir/data_batch_1.bin" && mkdir "$work/data_dir/data_batch_1.bin"
expect_error "8 data file is a folder" "data_batch_1.bin" "$run" -- "${train[@]}" --config "$root/configs/quick_cpu.json" \
  --set "data.dir=$work/data_dir" --output "$work/x"
grep -q 9223372036854775807 "$work/err" && fail "8 data file is a folder: prints a bogus size"
expect_error "8 huge value quoted short" "expected a list of layers" "$run" -- "${train[@]}" --config "$root/configs/quick_cpu.json" \
  "${small[@]}" --set "model.layers=$(python3 -c 'print("z" * 100000)')" --output "$work/x"

# 9. Values that used to wrap or be accepted.
expect_error "9 crop_padding 2^32+1" "crop_padding: expected an integer in 0\.\.1023, got 4294967297" "$run" -- \
  "${train[@]}" --config "$root/configs/quick_cpu.json" --set data.augment.crop_padding=4294967297 --output "$work/x"
expect_error "9 seed -1" "seed: expected a non-negative integer, got -1" "$run" -- \
  "${train[@]}" --config "$root/configs/quick_cpu.json" --set seed=-1 --output "$work/x"
printf '[1, 2]' >"$work/list.json"
expect_error "9 non-object config" "list.json': expected a JSON object" "$run" -- \
  "${train[@]}" --config "$work/list.json" --set epochs=1 --output "$work/x"
timeout 60 "${train[@]}" --config "$root/configs/quick_cpu.json" --max-steps -5 --output "$work/x" >"$work/out" 2>"$work/err"
rc=$?
if [ "$rc" -ne 0 ] && grep -q -- "--max-steps" "$work/err" && [ ! -e "$work/x" ]; then
  passed=$((passed + 1)); echo "ok   9 --max-steps -5: $(head -1 "$work/err")"
else
  fail "9 --max-steps -5: exit $rc, $(head -1 "$work/err")"
fi
# Usage errors exit 2 and name the option, for every command and benchmark.
usage_error() {  # usage_error NAME PATTERN COMMAND...
  local name=$1 pattern=$2
  shift 2
  timeout 60 "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  if [ "$rc" -eq 2 ] && grep -q -- "$pattern" "$work/err"; then
    passed=$((passed + 1)); echo "ok   9 usage: $name: $(head -1 "$work/err")"
  else
    fail "9 usage: $name: exit $rc (expected 2), $(head -1 "$work/err")"
  fi
}
usage_error "--max-steps -5" "--max-steps" "${train[@]}" --config "$root/configs/quick_cpu.json" --max-steps -5 --output "$work/x"
usage_error "--max-steps 0" "leave --max-steps out for no limit" "${train[@]}" --config "$root/configs/quick_cpu.json" \
  --max-steps 0 --output "$work/x"
usage_error "unknown option" "--bogus" "${train[@]}" --bogus
usage_error "train without a config" "--config FILE (or --resume RUN_DIR) is required" "${train[@]}"
usage_error "bench without a benchmark" "which benchmark" "$minidl" bench
usage_error "bench train --steps abc" "--steps" "$minidl" bench train --steps abc
usage_error "bench accuracy --runs 0" "--runs" "$minidl" bench accuracy --config "$root/configs/quick_cpu.json" --runs 0
usage_error "bench attention --dtype fp8" "--dtype" "$minidl" bench attention --dtype fp8
usage_error "bench data without --dir" "--dir" "$minidl" bench data --image-size 32

# 17. A validation split and the keys that watch it: each bad value is one message naming its key,
# before the run folder exists.
for v in 0 1 -0.1 NaN; do
  expect_error "17 data.val_fraction=$v" "data\.val_fraction: expected" "$run" -- \
    "${train[@]}" --config "$root/configs/quick_cpu.json" --set "data.val_fraction=$v" --output "$work/x"
done
expect_error "17 early_stopping.patience=-1" "early_stopping\.patience: expected an integer in 0\.\.1000000, got -1" "$run" -- \
  "${train[@]}" --config "$root/configs/quick_cpu.json" --set early_stopping.patience=-1 --output "$work/x"
expect_error "17 early_stopping without patience" "early_stopping\.patience: required" "$run" -- \
  "${train[@]}" --config "$root/configs/quick_cpu.json" --set early_stopping.monitor=val_acc --output "$work/x"
expect_error "17 early_stopping.monitor=val_accuracy" 'early_stopping\.monitor: expected "val_loss"' "$run" -- \
  "${train[@]}" --config "$root/configs/quick_cpu.json" --set early_stopping.patience=2 \
  --set early_stopping.monitor=val_accuracy --output "$work/x"
expect_error "17 val_loss without a validation split" "early_stopping\.monitor: \"val_loss\" is measured on a validation split" \
  "$run" -- "${train[@]}" --config "$root/configs/quick_cpu.json" "${small[@]}" --set early_stopping.patience=2 \
  --output "$work/x"
expect_error "17 checkpoint.monitor without save_best" "checkpoint\.monitor: only with checkpoint\.save_best" "$run" -- \
  "${train[@]}" --config "$root/configs/quick_cpu.json" --set checkpoint.monitor=val_acc --output "$work/x"
if [ -e "$work/x" ]; then fail "17: a refused run made its folder"; fi

# 13. Races: another run starts, resumes or finishes in the folder between a run's checks and
# its lock (MINIDL_TEST_PAUSE_BEFORE_LOCK holds the first run there, core/test_hooks.h). The checks
# are made again under the lock: the first run is refused and the other's files stay as they are.
tiny=(--config "$root/configs/quick_cpu.json" --set "data.dir=$data" --set data.train_limit=128
      --set data.test_limit=100 --set batch_size=32 --set output.progress=false)
go="$work/go"
race() {  # race NAME PATTERN DIR FIRST_RUN_ARGS... -- OTHER_RUN_ARGS...
  local name=$1 pattern=$2 dir=$3 first=() held before rc
  shift 3
  while [ "$1" != -- ]; do first+=("$1"); shift; done
  shift
  rm -f "$go" "$go.waiting"
  MINIDL_TEST_PAUSE_BEFORE_LOCK="$go" "${train[@]}" "${first[@]}" >"$work/out" 2>"$work/err" &
  held=$!
  for _ in $(seq 1200); do [ -f "$go.waiting" ] || ! kill -0 "$held" 2>/dev/null && break; sleep 0.05; done
  [ -f "$go.waiting" ] || { kill "$held" 2>/dev/null; wait "$held"; fail "$name: the first run never reached its lock"; return; }
  "${train[@]}" "$@" >/dev/null 2>&1 || { touch "$go"; wait "$held"; fail "$name: the other run failed"; return; }
  before=$(snapshot "$dir")
  touch "$go"
  wait "$held"
  rc=$?
  if [ "$rc" -ne 1 ] || ! grep -qE -- "$pattern" "$work/err"; then
    fail "$name: exit $rc: $(cat "$work/err")"
  elif [ "$(snapshot "$dir")" != "$before" ]; then
    fail "$name: the other run's files changed"
  else
    passed=$((passed + 1)); echo "ok   $name: $(cut -c1-150 "$work/err")"
  fi
}
race "13 fresh run: another run finished there first" "is not empty" "$work/race_fresh" \
  "${tiny[@]}" --set seed=1 --max-steps 2 --output "$work/race_fresh" -- "${tiny[@]}" --max-steps 2 --output "$work/race_fresh"
"${train[@]}" "${tiny[@]}" --max-steps 2 --output "$work/race_resume" >/dev/null 2>&1
race "13 resume: another run resumed there first" "checkpoint changed while this command was starting" \
  "$work/race_resume" --resume "$work/race_resume" --max-steps 4 -- --resume "$work/race_resume" --max-steps 3

# 14. Values that overflowed or became infinite (and so unresumable) are refused; repro keeps a
# user's files in its run folders; repro --steps must not be negative.
muon=(--config "$root/configs/airbench94_muon.json" --set "data.dir=$data" --set data.train_limit=512 --set batch_size=64)
expect_error "14 freeze from_epoch 1e30" "freeze\[2\].from_epoch: expected a number in \\[0, 1000000\\]" "$run" -- \
  "${train[@]}" "${muon[@]}" --set freeze.2.from_epoch=1e30 --output "$work/x"
expect_error "14 ns_eps 1e300" "ns_eps: expected a number in \\(0, 1\\]" "$run" -- \
  "${train[@]}" "${muon[@]}" --set optimizer.ns_eps=1e300 --output "$work/x"
expect_error "14 ns_steps 2^32+1" "ns_steps: expected an integer in 0..100" "$run" -- \
  "${train[@]}" "${muon[@]}" --set optimizer.ns_steps=4294967297 --output "$work/x"
expect_error "14 repro --steps -5" "--steps must be >= 0" "$run" -- \
  "$minidl" repro "${tiny[@]}" --steps -5 --output "$work/repro"
mkdir -p "$work/repro/run_a"
echo mine >"$work/repro/run_a/notes.txt"
"$minidl" repro "${tiny[@]}" --steps 1 --output "$work/repro" >"$work/out" 2>&1
if [ "$(cat "$work/repro/run_a/notes.txt" 2>/dev/null)" = mine ] && [ -f "$work/repro/run_a/steps.jsonl" ]; then
  passed=$((passed + 1)); echo "ok   14 repro keeps a user's file in its run folder"
else
  fail "14 repro: notes.txt in run_a is gone (or the run failed): $(tail -2 "$work/out")"
fi

# 15. A checkpoint with normalization statistics no run produces is refused; usage errors exit 2.
set_tensor_value() {  # set_tensor_value FILE NAME_SUFFIX FLOAT: the first float of that tensor
  python3 - "$@" <<'PY'
import json, struct, sys
path, suffix, value = sys.argv[1], sys.argv[2], float(sys.argv[3])
raw = bytearray(open(path, 'rb').read())
n = struct.unpack('<Q', raw[:8])[0]
header = json.loads(raw[8:8 + n])
name = next(k for k in sorted(header) if k.endswith(suffix))
start = 8 + n + header[name]['data_offsets'][0]
raw[start:start + 4] = struct.pack('<f', value)
open(path, 'wb').write(raw)
PY
}
for bad in nan -1 inf; do
  set_tensor_value "$run/checkpoint.safetensors" running_var "$bad"
  expect_error "15 checkpoint running_var $bad" "running_var\\[0\\] is .*no run produces" "$run" -- \
    "${train[@]}" --resume "$run" --set epochs=2
  restore
done
# A key twice in one object: nlohmann keeps one value silently.
python3 - "$root/configs/quick_cpu.json" "$work/dup.json" <<'PY'
import sys
open(sys.argv[2], "w").write(open(sys.argv[1]).read().replace('"seed": 0,', '"seed": 0, "seed": 1,', 1))
PY
expect_error "15 config: a key twice" 'the key "seed" appears twice' "$run" -- \
  "${train[@]}" --config "$work/dup.json" "${small[@]}" --output "$work/x"
python3 - "$run/checkpoint.safetensors" <<'PY'
import re, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
text = re.sub(rb'"__metadata__"\s*:\s*\{', lambda m: m.group(0) + b'"epoch":"0",', raw[8:8 + n].rstrip(), count=1)
text += b" " * ((8 - len(text) % 8) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
PY
expect_error "15 checkpoint header: a key twice" 'header: the key "epoch" appears twice' "$run" -- \
  "${train[@]}" --resume "$run" --set epochs=2
restore
# A damaged line inside steps.jsonl (not a torn last one): refused, not every later record dropped.
cp "$run/steps.jsonl" "$work/steps.good"
sed -i '2s/.*/{"step": 1, garbage/' "$run/steps.jsonl"
expect_error "15 steps.jsonl: a damaged line 2" "steps.jsonl': line 2 is not a JSON record" "$run" -- \
  "${train[@]}" --resume "$run" --set epochs=2
cp "$work/steps.good" "$run/steps.jsonl"
expect_rc "15 usage error: --max-steps -1" 2 "$minidl" train --max-steps -1
expect_rc "15 usage error: an unknown option" 2 "$minidl" train --no-such-option

# 16. A model larger than memory is refused before anything is allocated (64 Linear layers at the
# 2^31-element limit: 550 GB); a changed byte in a checkpoint's tensors is "damaged"; a killed
# export leaves the ONNX file that was there; a huge or control-byte config value is echoed short
# and escaped.
linears=$(python3 -c 'import json; print(json.dumps({"type": "Sequential", "layers": [{"type": "Linear", "in_features": 65536, "out_features": 32768}] * 64}))')
start=$(date +%s)
expect_error "16 a model larger than memory" \
  "model.layers\[0\].layers\[0\] \(Linear 65536->32768\): 8.6 GB of parameters and buffers; the model needs about 566.9 GB of host memory" \
  "$run" -- "${train[@]}" --config "$root/configs/quick_cpu.json" "${small[@]}" --set "model.layers.0=$linears" --output "$work/x"
[ $(( $(date +%s) - start )) -le 30 ] || fail "16 a model larger than memory: took more than 30 s"
python3 - "$run/checkpoint.safetensors" <<'PY'
import json, struct, sys
raw = bytearray(open(sys.argv[1], 'rb').read())
n = struct.unpack('<Q', raw[:8])[0]
header = json.loads(raw[8:8 + n])
raw[8 + n + header['0.weight']['data_offsets'][0] + 1] ^= 0x10
open(sys.argv[1], 'wb').write(raw)
PY
expect_error "16 checkpoint: one bit of a weight flipped" "checkpoint '.*checkpoint.safetensors' is damaged: its tensors' CRC-32" \
  "$run" -- "${train[@]}" --resume "$run" --set epochs=2
restore
mkdir -p "$work/onnx"
"$minidl" export --config "$root/configs/quick_cpu.json" --onnx "$work/onnx/model.onnx" >"$work/out" 2>&1 ||
  fail "16 export: $(tail -1 "$work/out")"
before=$(sha256sum <"$work/onnx/model.onnx")
MINIDL_TEST_KILL_AT=write:model.onnx "$minidl" export --run "$run" --onnx "$work/onnx/model.onnx" >"$work/out" 2>&1
code=$?
if [ $code -ne 137 ]; then
  fail "16 export killed while writing: exit $code, expected 137 (SIGKILL at the write)"
elif [ "$(sha256sum <"$work/onnx/model.onnx")" != "$before" ]; then
  fail "16 export killed while writing: the existing model.onnx changed"
else
  passed=$((passed + 1)); echo "ok   16 export killed while writing leaves the existing model.onnx"
fi
python3 - "$root/configs/quick_cpu.json" "$work" <<'PY'
import json, sys
base = json.load(open(sys.argv[1]))
json.dump(dict(base, precision='x' * (5 << 20)), open(sys.argv[2] + '/huge_value.json', 'w'))
json.dump(dict(base, precision='fp32\x1b[2J\x1b[31m'), open(sys.argv[2] + '/esc_value.json', 'w'))
PY
expect_error "16 a 5 MB config value" 'precision: expected "auto", "fp32", "bf16" or "fp16", got "x+\.\.\."$' "$run" -- \
  "${train[@]}" --config "$work/huge_value.json" "${small[@]}" --output "$work/x"
[ "$(wc -c <"$work/err")" -lt 300 ] || fail "16 a 5 MB config value: a message of $(wc -c <"$work/err") bytes"
expect_error "16 ESC bytes in a config value" 'got "fp32\\x1b\[2J\\x1b\[31m"' "$run" -- \
  "${train[@]}" --config "$work/esc_value.json" "${small[@]}" --output "$work/x"
expect_error "16 a 100 KB --set value" 'data.format: expected .*, got "y+\.\.\."$' "$run" -- \
  "${train[@]}" --config "$root/configs/quick_cpu.json" "${small[@]}" --set "data.format=$(head -c 100000 /dev/zero | tr '\0' y)" \
  --output "$work/x"
[ "$(wc -c <"$work/err")" -lt 300 ] || fail "16 a 100 KB --set value: a message of $(wc -c <"$work/err") bytes"

# 12. Image folders: a file that does not decode, a head whose width is not the class count,
# a missing image size. PNGs written with the standard library only.
python3 - "$work/folder" <<'PY'
import os, struct, sys, zlib
def png(path, w, h):
    rows = b"".join(b"\x00" + bytes((x * 9 + y * 5) % 256 for x in range(w * 3)) for y in range(h))
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    data = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "wb").write(data)
for split in ("train", "test"):
    for c in ("cats", "dogs"):
        for i in range(3):
            png(f"{sys.argv[1]}/{split}/{c}/{i}.png", 20, 20)
PY
printf 'not a jpeg' >"$work/folder/train/dogs/broken.jpg"
folder=(--set data.format=image_folder --set data.dir="$work/folder" --set data.image_size=20 --set batch_size=2)
expect_error "12 image folder: a file that does not decode" "broken.jpg': neither JPEG nor PNG.*skip_bad" "$run" -- \
  "${train[@]}" --config "$root/configs/quick_cpu.json" "${folder[@]}" --output "$work/x"
expect_error "12 image folder: head width" "output has 10 values per image, but the data \(image_folder\) has 2 classes" \
  "$run" -- "${train[@]}" --config "$root/configs/quick_cpu.json" "${folder[@]}" --set data.skip_bad=true --output "$work/x"
expect_error "12 image folder: no image_size" "data.image_size: an image folder needs the size" "$run" -- \
  "${train[@]}" --config "$root/configs/quick_cpu.json" --set data.format=image_folder --set data.dir="$work/folder" \
  --output "$work/x"

# 10. A fresh run into a used folder; a config error is refused before the run folder exists; a
# fatal error during the run (a NaN loss) reaches log.txt and the terminal, exit 3.
expect_error "10 fresh run into a used folder" "is not empty.*--overwrite" "$run" -- \
  "${train[@]}" --config "$root/configs/quick_cpu.json" "${small[@]}" --output "$run"
expect_error "10 shape error" "model.layers: the model does not take the data's 3x32x32 images" "$run" -- \
  "${train[@]}" --config "$root/configs/quick_cpu.json" "${small[@]}" --set model.layers.1.num_features=7 \
  --output "$work/shape"
if [ -e "$work/shape" ]; then fail "10 shape error: the run folder was made before the model was checked"; fi
timeout 120 "${train[@]}" --config "$root/configs/quick_cpu.json" "${small[@]}" --set optimizer.lr=1e30 \
  --output "$work/fatal" >"$work/out" 2>"$work/err"
code=$?
# On the CPU the losses are read after every step: the run stops at the NaN's step, not the epoch's end.
# log.txt's lines start with their UTC time.
if [ $code -eq 3 ] && grep -qE "^[0-9T:-]+Z error: the loss is NaN at step 1" "$work/fatal/log.txt" &&
    grep -q "^error: the loss is NaN" "$work/err" && [ "$(wc -l < "$work/fatal/steps.jsonl")" -eq 2 ]; then
  passed=$((passed + 1)); echo "ok   10 NaN loss in log.txt: $(grep 'Z error: ' "$work/fatal/log.txt" | cut -c1-140)"
else
  fail "10 NaN loss: exit $code, $(cat "$work/out" "$work/err" | tail -3)"
fi

# 3. Signals: stop at a step boundary with a checkpoint, resume; stale temp files are removed.
for sig in INT TERM; do
  dir="$work/sig_$sig"
  "${train[@]}" --config "$root/configs/quick_cpu.json" --set "data.dir=$data" --set data.train_limit=2048 \
    --set epochs=3 --set output.progress=false --output "$dir" >"$work/out_$sig" 2>&1 &
  pid=$!
  for _ in $(seq 600); do grep -q "minidl train:" "$dir/log.txt" 2>/dev/null && break; sleep 0.1; done
  sleep 3
  kill -"$sig" "$pid"
  wait "$pid"
  rc=$?
  want=$([ "$sig" = INT ] && echo 130 || echo 143)
  if [ "$rc" -ne "$want" ]; then
    fail "3 SIG$sig: exit $rc, expected $want"; tail -3 "$work/out_$sig"
  elif ! grep -q "stopped by SIG$sig after step" "$dir/log.txt" || [ ! -f "$dir/checkpoint.safetensors" ]; then
    fail "3 SIG$sig: no message or no checkpoint"; tail -3 "$dir/log.txt"
  elif compgen -G "$dir/*.tmp.*" >/dev/null; then
    fail "3 SIG$sig: temp files left: $(ls "$dir")"
  else
    passed=$((passed + 1)); echo "ok   3 SIG$sig: exit $rc, $(grep 'stopped by' "$dir/log.txt" | cut -c1-110)"
  fi
done
dead=$(sh -c 'echo $$')
touch "$work/sig_INT/checkpoint.safetensors.tmp.$dead" "$work/sig_INT/model.safetensors.tmp.$dead"
expect_rc "3 resume after SIGINT" 0 "${train[@]}" --resume "$work/sig_INT"
if compgen -G "$work/sig_INT/*.tmp.*" >/dev/null; then
  fail "3 stale temp files of a dead process were not removed"
elif ! grep -q "removed temporary files left by killed runs" "$work/sig_INT/log.txt"; then
  fail "3 stale temp files: no log line"
else
  passed=$((passed + 1)); echo "ok   3 stale temp files removed"
fi

# 17. What a command must not replace or trust: a user's run in repro's folders.
"${train[@]}" "${tiny[@]}" --max-steps 1 --output "$work/repro_user/run_a" >/dev/null 2>&1
expect_error "17 repro: a user's run in run_a" "run_a' holds a run that repro did not make" "$work/repro_user" -- \
  "$minidl" repro "${tiny[@]}" --steps 1 --output "$work/repro_user"
expect_rc "17 repro replaces the runs it made itself" 0 "$minidl" repro "${tiny[@]}" --steps 1 --output "$work/repro"

# Profile's folder and files, and messages that named the wrong problem.
echo data >"$work/profile_file"
expect_error "17 profile --output a file" "profile --output $work/profile_file: exists and is not a folder" "$run" -- \
  "$minidl" profile "${tiny[@]}" --steps 1 --warmup 0 --output "$work/profile_file"
expect_error "17 profile --compare a folder" "is a directory, not a file" "$run" -- \
  "$minidl" profile --compare "$work" "$work"
expect_error "17 profile into a training run's folder" "is a training run's folder \(it holds config.json\)" "$work/repro_user/run_a" -- \
  "$minidl" profile "${tiny[@]}" --steps 1 --warmup 0 --output "$work/repro_user/run_a"
usage_error "profile --warmup -1" "--warmup: must be >= 0, got -1" \
  "$minidl" profile "${tiny[@]}" --warmup -1
usage_error "--max-steps 1.5" "--max-steps: must be a whole number (>= 1), got 1.5" \
  "${train[@]}" --config "$root/configs/quick_cpu.json" --max-steps 1.5 --output "$work/x"
expect_error "17 epochs 1000001 echoed as written" "epochs: expected a number in \(0, 1000000\], got 1000001$" "$run" -- \
  "${train[@]}" "${tiny[@]}" --set epochs=1000001 --output "$work/x"

echo "bad_input: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
