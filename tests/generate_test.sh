#!/usr/bin/env bash
# ctest generate_cli: `minidl generate` on a run folder written here (python3's standard library
# only): a bigram language model (Embedding then a Linear head, V = 260, a padded vocabulary) and
# a byte-level vocabulary of 258 tokens in GPT-2's format (id = byte, 256 = <|endoftext|>, 257 =
# the one merge, "hi").
#   - --temperature 0 prints the greedy continuation the test computes itself from the weights,
#     as ids (--prompt-ids, no tokenizer folder) and as text (--prompt, --tokenizer);
#   - the same --seed prints the same text, another seed other text; no id past the tokenizer's
#     vocabulary is drawn from the padded one;
#   - bad input: no prompt and a negative temperature (exit 2), an id outside the vocabulary, a
#     missing tokenizer, a tokenizer larger than the model's vocabulary, a model without positions
#     run without --context, an image classifier's run (exit 1, one line);
#   - configs/gpt2_tiny_cpu.json trained a few steps on README.md's bytes, then generate
#     --tokenizer bytes: the prompt and 40 bytes, the same twice for one seed, a prompt longer than
#     the run's data.seq_len cropped.
#   tests/generate_test.sh MINIDL SOURCE_DIR PYTHON3
set -euo pipefail
minidl=$(realpath "$1") src=$(realpath "$2") python=${3:-}
if [ -z "$python" ] || ! "$python" -c "import struct" 2>/dev/null; then echo "SKIPPED: no python3"; exit 4; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$work"  # no build/gpt2-tokenizer here: --prompt-ids prints ids

"$python" - "$work" <<'PY'
import json, os, random, struct, sys
work = sys.argv[1]
V, D, VOCAB = 260, 8, 258
rng = random.Random(5)
emb = [[rng.gauss(0, 1) for _ in range(D)] for _ in range(V)]
w = [[rng.gauss(0, 1) for _ in range(D)] for _ in range(V)]
b = [rng.gauss(0, 0.5) for _ in range(V)]
b[258] = b[259] = 6.0  # the padding ids are likely: drawn often, were the tokenizer's vocabulary not the limit
# float32 values, as the model holds them.
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
emb, w, b = [[f32(x) for x in r] for r in emb], [[f32(x) for x in r] for r in w], [f32(x) for x in b]
run = os.path.join(work, "run")
os.makedirs(run)
layers = [{"type": "Embedding", "num_embeddings": V, "embedding_dim": D},
          {"type": "Linear", "in_features": D, "out_features": V}]
json.dump({"model": {"layers": layers}, "optimizer": {"type": "SGD", "lr": 0.1}, "device": "cpu"},
          open(os.path.join(run, "config.json"), "w"))
tensors = [("0.weight", [V, D], [x for r in emb for x in r]), ("1.weight", [V, D], [x for r in w for x in r]),
           ("1.bias", [V], b)]
header, offset = {}, 0
for name, shape, values in tensors:
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + 4 * len(values)]}
    offset += 4 * len(values)
h = json.dumps(header).encode()
with open(os.path.join(run, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for _, _, values in tensors:
        f.write(struct.pack("<%df" % len(values), *values))
# An image classifier's run: Flatten then Linear over CIFAR's 3 x 32 x 32.
clf = os.path.join(work, "classifier")
os.makedirs(clf)
json.dump({"model": {"layers": [{"type": "Flatten"}, {"type": "Linear", "in_features": 3072, "out_features": 10}]},
           "optimizer": {"type": "SGD", "lr": 0.1}, "device": "cpu"}, open(os.path.join(clf, "config.json"), "w"))
h = json.dumps({"1.weight": {"dtype": "F32", "shape": [10, 3072], "data_offsets": [0, 122880]},
                "1.bias": {"dtype": "F32", "shape": [10], "data_offsets": [122880, 122920]}}).encode()
with open(os.path.join(clf, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + bytes(122920))
# GPT-2's byte-to-character map: id = byte, then <|endoftext|> and "hi".
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
cs, n = bs[:], 0
for x in range(256):
    if x not in bs:
        bs.append(x)
        cs.append(256 + n)
        n += 1
char = dict(zip(bs, map(chr, cs)))
tok = os.path.join(work, "tok")
os.makedirs(tok)
enc = {char[x]: x for x in range(256)}
enc["<|endoftext|>"] = 256
enc["hi"] = 257
json.dump(enc, open(os.path.join(tok, "encoder.json"), "w"))
open(os.path.join(tok, "vocab.bpe"), "w").write("#version: 0.2\nh i\n")
# The greedy continuations, each logit float64 over float32 weights (the argmax of a bigram
# model depends on the last token only); the text one as bytes, <|endoftext|> spelt out.
def greedy(prompt, n, vocab):
    out = list(prompt)
    for _ in range(n):
        e = emb[out[-1]]
        logits = [sum(w[v][k] * e[k] for k in range(D)) + b[v] for v in range(vocab)]
        out.append(max(range(vocab), key=lambda v: logits[v]))
    return out
open(os.path.join(work, "greedy_ids"), "w").write(" ".join(map(str, greedy([1, 2, 3], 20, V))) + "\n")
text = greedy([257], 20, VOCAB)
spelling = lambda t: bytes([t]) if t < 256 else b"<|endoftext|>" if t == 256 else b"hi"
with open(os.path.join(work, "greedy_text"), "wb") as f:
    f.write(b"".join(map(spelling, text)) + b"\n")
PY

run=(generate --run "$work/run")
# Greedy as ids: the prompt then 20 ids, as computed above.
"$minidl" "${run[@]}" --prompt-ids 1,2,3 --max-new-tokens 20 --temperature 0 --context 4 >"$work/ids"
cmp -s "$work/ids" "$work/greedy_ids" || fail "greedy ids: $(cat "$work/ids") != $(cat "$work/greedy_ids")"
# Greedy as text through the tokenizer (its 258 ids; the model's last two never drawn).
"$minidl" "${run[@]}" --tokenizer "$work/tok" --prompt hi --max-new-tokens 20 --temperature 0 --context 4 >"$work/text"
cmp -s "$work/text" "$work/greedy_text" || fail "greedy text: $(od -c "$work/text" | head -3)"

# Sampling: the seed's text, twice; another seed's differs; nothing past the tokenizer's ids.
sample() { "$minidl" "${run[@]}" --prompt-ids 7 --max-new-tokens 40 --context 1 --top-k 50 "$@"; }
sample --seed 3 >"$work/a"
sample --seed 3 >"$work/b"
sample --seed 4 >"$work/c"
cmp -s "$work/a" "$work/b" || fail "the same seed gave other ids"
cmp -s "$work/a" "$work/c" && fail "seeds 3 and 4 gave the same ids"
[ "$(wc -w <"$work/a")" -eq 41 ] || fail "not 41 ids: $(cat "$work/a")"
for s in 1 2 3 4 5; do
  "$minidl" "${run[@]}" --tokenizer "$work/tok" --prompt-ids 7 --max-new-tokens 40 --context 1 --seed $s \
    --temperature 2 >"$work/t" || fail "a draw past the tokenizer's vocabulary (seed $s)"
done

# Bad input: one line naming what is wrong, exit 2 for usage and 1 for the rest.
expect() {  # expect CODE TEXT ARGS...: the exit code and a line of stderr
  local code=$1 text=$2 rc=0
  shift 2
  "$minidl" "$@" >/dev/null 2>"$work/err" || rc=$?
  [ "$rc" -eq "$code" ] && grep -qF -- "$text" "$work/err" || { cat "$work/err"; fail "minidl $* exited $rc"; }
}
expect 2 "--prompt TEXT or --prompt-ids IDS is required" "${run[@]}" --context 4
expect 2 "--temperature: must be >= 0 (0 takes the most likely token), got -1" "${run[@]}" --prompt-ids 1 \
  --temperature -1 --context 4
expect 1 "prompt token 300 at index 1 is outside the model's vocabulary [0, 260)" "${run[@]}" --prompt-ids 1,300 \
  --context 4
expect 1 "encoder.json" "${run[@]}" --prompt hi --tokenizer "$work/none" --context 4
expect 1 "no data.seq_len and its model no PositionEmbedding: give --context" "${run[@]}" --prompt-ids 1
expect 1 "holds an image classifier (its model takes images): minidl predict" generate --run "$work/classifier" \
  --prompt-ids 1
mkdir "$work/big"
"$python" -c 'import json, sys; e = json.load(open(sys.argv[1])); e.update({"x%d" % i: 258 + i for i in range(3)}); json.dump(e, open(sys.argv[2], "w"))' \
  "$work/tok/encoder.json" "$work/big/encoder.json"
cp "$work/tok/vocab.bpe" "$work/big/"
expect 1 "its 261 tokens do not fit the model's vocabulary of 260" "${run[@]}" --tokenizer "$work/big" --prompt hi \
  --context 4

# A language model trained from its config on README.md's bytes, sampled as text.
"$minidl" tokenize --tokenizer bytes "$src/README.md" "$work/bytes" >/dev/null
"$minidl" train --config "$src/configs/gpt2_tiny_cpu.json" --set "data.dir=$work/bytes" --set data.train_limit=64 \
  --set output.progress=false --output "$work/tiny" >"$work/train.out" 2>&1 || { cat "$work/train.out"; fail "training"; }
tiny=(generate --run "$work/tiny" --tokenizer bytes --max-new-tokens 40 --top-k 20)
"$minidl" "${tiny[@]}" --prompt "The model " --seed 2 >"$work/t1"
"$minidl" "${tiny[@]}" --prompt "The model " --seed 2 >"$work/t2"
cmp -s "$work/t1" "$work/t2" || fail "the tiny run's text differs for one seed"
[ "$(head -c 10 "$work/t1")" == "The model " ] || fail "the text does not start with the prompt: $(cat "$work/t1")"
[ "$(wc -c <"$work/t1")" -eq 51 ] || fail "not the prompt, 40 bytes and a newline: $(od -c "$work/t1" | tail -3)"
long=$(head -c 100 "$src/README.md" | tr -d '\0')
"$minidl" "${tiny[@]}" --prompt "$long" --temperature 0 >"$work/long" || fail "a prompt longer than data.seq_len"
echo "generate_cli: ok"
