#!/usr/bin/env bash
# ctest token_train: a language model trained from JSON on a token set, end to end on the CPU:
#   - `minidl tokenize --tokenizer bytes` makes train.bin and val.bin from README.md;
#   - `minidl summary` of configs/gpt2_tiny_cpu.json counts its 120,576 parameters over (B, 64) ids
#     and configs/gpt2_124m.json's 124,475,904 (GPT-2 small with the vocabulary padded to 50304, as nanoGPT and llm.c train it);
#   - a short run lowers the validation loss below a uniform guess (ln 256) and records val.bin's
#     loss, perplexity and tokens/s in metrics.jsonl and summary.json; `minidl eval` of the run
#     gives the same loss and token accuracy, bit for bit;
#   - `minidl repro` gives the same bits twice; a run stopped part-way through an epoch and resumed
#     ends with the uninterrupted run's bits, evaluating val.bin every 2 steps (eval.every_steps)
#     into evals.jsonl on the way;
#   - bad input is one clear message: image keys for tokens, no seq_len, a model that does not take
#     ids, a vocabulary too small for the data.
#   tests/token_train_test.sh MINIDL SOURCE_DIR
set -euo pipefail
minidl=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cfg=$src/configs/gpt2_tiny_cpu.json

"$minidl" tokenize --tokenizer bytes "$src/README.md" "$work/tokens" >"$work/tokenize.out"
grep -q "training tokens in $work/tokens/train.bin" "$work/tokenize.out" || { cat "$work/tokenize.out"; fail "tokenize"; }
set_data=(--set "data.dir=$work/tokens" --set output.progress=false)

"$minidl" summary --config "$cfg" "${set_data[@]}" >"$work/summary"
grep -q "^parameters: 120,576 " "$work/summary" || { cat "$work/summary"; fail "summary of gpt2_tiny_cpu"; }
grep -q "(16, 64, 256)" "$work/summary" || fail "summary: no (16, 64, 256) logits"
"$minidl" summary --config "$src/configs/gpt2_124m.json" --device cpu --batch-size 1 --set data.seq_len=8 \
  >"$work/summary124" 2>&1
grep -q "^parameters: 124,475,904 " "$work/summary124" || { tail -3 "$work/summary124"; fail "summary of gpt2_124m"; }

# A short run learns: byte-level English is far from uniform.
"$minidl" train --config "$cfg" "${set_data[@]}" --output "$work/run" >"$work/run.out" 2>&1 ||
  { cat "$work/run.out"; fail "training gpt2_tiny_cpu"; }
grep -q "^done: val.bin loss [0-9.]* (perplexity [0-9.]*, [0-9]* windows, the final weights)" "$work/run.out" ||
  { cat "$work/run.out"; fail "no done line with val.bin's loss"; }
python3 - "$work/run" <<'PY' || fail "metrics"
import json, math, sys
run = sys.argv[1]
records = [json.loads(l) for l in open(run + "/metrics.jsonl") if '"epoch"' in l]
s = json.load(open(run + "/summary.json"))
assert records and all(k in records[-1] for k in ("test_loss", "tokens_per_s", "train_loss")), records[-1]
assert s["test_loss"] == records[-1]["test_loss"], (s["test_loss"], records[-1]["test_loss"])
assert s["test_loss"] < math.log(256) - 1, s["test_loss"]  # well below a uniform guess over bytes
assert s["tokens_per_s"] > 0 and "per_class_acc" not in s
PY
# minidl eval gives the run's own numbers for its final weights.
"$minidl" eval --run "$work/run" >"$work/eval.out" 2>&1 || { cat "$work/eval.out"; fail "eval"; }
grep -q "^loss [0-9.]*   perplexity [0-9.]*   tokens right [0-9.]*%   ([0-9]* windows of 64)" "$work/eval.out" ||
  { cat "$work/eval.out"; fail "eval's line"; }
python3 - "$work/run" <<'PY' || fail "eval.json differs from the run's evaluation"
import json, sys
s, e = json.load(open(sys.argv[1] + "/summary.json")), json.load(open(sys.argv[1] + "/eval.json"))
assert (e["loss"], e["accuracy"], e["windows"]) == (s["test_loss"], s["test_acc"], s["splits"]["test"]), (e, s)
PY

# The same bits twice; a resume part-way through the epoch ends where the whole run ends.
"$minidl" repro --config "$cfg" "${set_data[@]}" --steps 3 --output "$work/repro" >"$work/repro.out" 2>&1 ||
  { cat "$work/repro.out"; fail "repro"; }
grep -q "IDENTICAL" "$work/repro.out" || { cat "$work/repro.out"; fail "repro: not identical"; }
small=(--config "$cfg" "${set_data[@]}" --set data.train_limit=96 --set checkpoint.every_steps=2)
"$minidl" train "${small[@]}" --output "$work/whole" >/dev/null 2>&1 || fail "the uninterrupted run"
# The stopped run also evaluates val.bin every 2 steps (eval.every_steps), which changes no bit.
"$minidl" train "${small[@]}" --set eval.every_steps=2 --output "$work/part" --max-steps 3 >/dev/null 2>&1 ||
  fail "the first part"
"$minidl" train --resume "$work/part" >"$work/resume.out" 2>&1 || { cat "$work/resume.out"; fail "the resume"; }
cmp -s "$work/whole/model.safetensors" "$work/part/model.safetensors" || fail "the resumed run's weights differ"
grep -q "^step 4: val.bin loss [0-9.]* (perplexity " "$work/resume.out" || { cat "$work/resume.out"; fail "no step 4 line"; }
python3 - "$work/part/evals.jsonl" <<'PY' || fail "evals.jsonl"
import json, sys
records = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in records] == [2, 4], records  # the epoch's end (step 6) is in metrics.jsonl
assert all(r["test_loss"] > 0 and r["epoch"] == 1 for r in records), records
PY

# Bad input.
bad() {  # bad PATTERN ARGS...: minidl train ARGS exits 1 with one error matching PATTERN
  local pattern=$1 rc=0
  shift
  "$minidl" train --config "$cfg" "${set_data[@]}" --output "$work/bad" --overwrite "$@" >"$work/bad.out" 2>&1 || rc=$?
  [ "$rc" -eq 1 ] && grep -q -- "$pattern" "$work/bad.out" || { cat "$work/bad.out"; fail "no '$pattern' (exit $rc)"; }
}
bad 'data.mean: not for "format": "tokens"' --set 'data.mean=[0.5,0.5,0.5]'
bad "memory_format: a language model's activations are (B, T, D)" --set memory_format=channels_last
bad 'eval.tta: "flip" augments images' --set eval.tta=flip
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); del c["data"]["seq_len"]; json.dump(c,open(sys.argv[2],"w"))' \
  "$cfg" "$work/no_seq_len.json"
rc=0; "$minidl" train --config "$work/no_seq_len.json" "${set_data[@]}" --output "$work/bad" >"$work/bad.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] && grep -q "data.seq_len: a token set needs the tokens of a sample's input" "$work/bad.out" ||
  { cat "$work/bad.out"; fail "no seq_len"; }
bad "model.layers: the model's output has 100 values per token, but the data has token" \
  --set model.layers.0.num_embeddings=100
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["model"]["layers"]=[{"type":"Linear","in_features":64,"out_features":256}]; json.dump(c,open(sys.argv[2],"w"))' \
  "$cfg" "$work/image_model.json"
rc=0; "$minidl" train --config "$work/image_model.json" "${set_data[@]}" --output "$work/bad" --overwrite >"$work/bad.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] && grep -q "model.layers: the model does not take the data's windows of 64 token ids" "$work/bad.out" ||
  { cat "$work/bad.out"; fail "a model that does not take ids"; }
echo "token_train: passed"
