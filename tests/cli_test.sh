#!/usr/bin/env bash
# ctest cli: what every command-line tool does, checked on the built minidl:
#   - an unknown command is named (with a did-you-mean when one is close), exit 2; so are a
#     misspelt config key and layer type;
#   - --version gives the version, the git commit, the CUDA/cuDNN and NCCL/MPI lines, the flags;
#   - `minidl completion bash` is valid bash and completes commands, sub-commands, options and
#     the values of options with a fixed set, from the parser itself; the zsh script wraps it;
#   - no help text cites a source header;
#   - `minidl summary` counts quick_cpu's parameters and shapes;
#   - scripts/fetch-archive.sh (behind fetch-cifar10.sh and fetch-cifar100.sh) unpacks an archive
#     whose md5 matches, does nothing the second time, and refuses one whose md5 differs.
#   tests/cli_test.sh MINIDL SOURCE_DIR
set -euo pipefail
minidl=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Unknown commands.
rc=0; "$minidl" frobnicate 2>"$work/err" || rc=$?
[ "$rc" -eq 2 ] || fail "minidl frobnicate exited $rc"
grep -q "^minidl: error: unknown command 'frobnicate'; the commands are train, predict, eval, summary," "$work/err" ||
  { cat "$work/err"; fail "frobnicate"; }
rc=0; "$minidl" trian --config x 2>"$work/err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "unknown command 'trian' (did you mean 'train'?)" "$work/err" || { cat "$work/err"; fail "trian"; }
rc=0; "$minidl" 2>"$work/err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "^Usage: " "$work/err" || { cat "$work/err"; fail "minidl without a command"; }

# Mistyped config keys and layer types.
rc=0; "$minidl" summary --config "$src/configs/quick_cpu.json" --set epoch=3 2>"$work/err" || rc=$?
[ "$rc" -eq 1 ] && grep -q "^minidl: error: epoch: unknown key (did you mean 'epochs'?) (known: " "$work/err" ||
  { cat "$work/err"; fail "a misspelt key"; }
rc=0; "$minidl" summary --config "$src/configs/quick_cpu.json" --set model.layers.0.type=Conv2D 2>"$work/err" || rc=$?
[ "$rc" -eq 1 ] && grep -q "model.layers\[0\].type: unknown layer 'Conv2D' (did you mean 'Conv2d'?)" "$work/err" ||
  { cat "$work/err"; fail "a misspelt layer type"; }

# --version.
"$minidl" --version >"$work/version"
grep -Eq "^minidl [0-9]+\.[0-9]+\.[0-9]+ \(git ([0-9a-f]{12}(-dirty)?|unknown .*)\)$" "$work/version" ||
  { cat "$work/version"; fail "--version: no version line"; }
grep -Eq "^(CUDA runtime [0-9.]+ \(built with [0-9.]+\), driver .*, cuDNN [0-9.]+ \(built with [0-9.]+\)|built without CUDA)$" \
  "$work/version" || { cat "$work/version"; fail "--version: no CUDA line"; }
grep -Eq "^(NCCL [0-9.]+|NCCL: not built), (MPI: not built|.+)$" "$work/version" || fail "--version: no NCCL/MPI line"
grep -q "^build: .* build, .*-ffp-contract=off" "$work/version" || fail "--version: no build line"

# Completion, exercised as bash calls it.
"$minidl" completion bash >"$work/minidl.bash"
bash -n "$work/minidl.bash" || fail "the bash completion script does not parse"
complete_words() {  # complete_words WORD... : what TAB offers after the words (the last one is being typed)
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _minidl; printf "%s\n" "${COMPREPLY[@]}"' \
    _ "$work/minidl.bash" "$@"
}
[ "$(complete_words minidl tr)" == "train" ] || fail "completion of 'tr': $(complete_words minidl tr)"
grep -qx predict <<<"$(complete_words minidl "")" || fail "completion of the commands lacks predict"
[ "$(complete_words minidl train --dis)" == "$(printf -- '--dist\n--dist-timeout')" ] || fail "completion of --dis"
[ "$(complete_words minidl train --dist "")" == "$(printf 'auto\nsingle\nmpi\nnccl')" ] || fail "completion of --dist's values"
[ "$(complete_words minidl eval --tta f)" == "$(printf 'flip\nflip_translate')" ] || fail "completion of --tta's values"
[ "$(complete_words minidl bench a)" == "$(printf 'accuracy\nattention\nallreduce')" ] ||
  fail "completion of bench's sub-commands: $(complete_words minidl bench a)"
grep -qx -- --runs <<<"$(complete_words minidl bench accuracy --r)" || fail "completion inside bench accuracy"
"$minidl" completion zsh >"$work/_minidl"
[ "$(head -1 "$work/_minidl")" == "#compdef minidl" ] || fail "the zsh script has no #compdef line"
grep -q "bashcompinit" "$work/_minidl" || fail "the zsh script does not load bashcompinit"
if command -v zsh >/dev/null; then zsh -n "$work/_minidl" || fail "the zsh script does not parse"; fi

# Help texts speak to users: no source header paths.
for c in "" train predict eval summary profile repro export layers config parity tokenize generate completion bench \
  "bench accuracy" "bench train" "bench norm" "bench conv" "bench data" "bench attention" "bench allreduce"; do
  # shellcheck disable=SC2086
  "$minidl" $c --help >"$work/help"
  if grep -Eo "[a-z_]+/[a-z_0-9]+\.(h|cpp|cu)\b" "$work/help"; then fail "'minidl $c --help' cites a source file"; fi
done

# summary: quick_cpu's 94,752 parameters and its layers' shapes at its batch of 128.
"$minidl" summary --config "$src/configs/quick_cpu.json" >"$work/summary"
grep -q "^parameters: 94,752 (379.01 KB), 94,752 trainable$" "$work/summary" || { cat "$work/summary"; fail "summary: parameters"; }
grep -Eq "^0  Conv2d .* \(128, 32, 32, 32\) +864 " "$work/summary" || { cat "$work/summary"; fail "summary: the first layer"; }
grep -Eq "^10  Linear .* \(128, 10\) +1,280 " "$work/summary" || { cat "$work/summary"; fail "summary: the head"; }
"$minidl" summary --config "$src/configs/quick_cpu.json" --batch-size 1 --json >"$work/summary.json"
grep -q '"batch_size": 1,' "$work/summary.json" || fail "summary --json --batch-size 1"
# The download scripts' checksum, on an archive made here and fetched through file://.
if command -v curl >/dev/null; then
  mkdir -p "$work/archive/data"
  echo "payload" >"$work/archive/data/a.bin"
  tar -czf "$work/data.tar.gz" -C "$work/archive" data
  md5=$(md5sum "$work/data.tar.gz" | cut -d' ' -f1)
  bash "$src/scripts/fetch-archive.sh" test "file://$work/data.tar.gz" "$md5" "$work/got" data a.bin >"$work/fetch" 2>&1
  grep -q "test: unpacked into $work/got/data" "$work/fetch" && [ -f "$work/got/data/a.bin" ] || fail "fetch-archive.sh"
  bash "$src/scripts/fetch-archive.sh" test "file://$work/data.tar.gz" "$md5" "$work/got" data a.bin >"$work/fetch" 2>&1
  grep -q "already in" "$work/fetch" || fail "fetch-archive.sh fetched again"
  rc=0; bash "$src/scripts/fetch-archive.sh" test "file://$work/data.tar.gz" 0123 "$work/bad" data a.bin >"$work/err" 2>&1 || rc=$?
  [ "$rc" -eq 1 ] && grep -q "has md5 $md5, expected 0123 (corrupt download" "$work/err" && [ ! -e "$work/bad/data" ] ||
    fail "fetch-archive.sh accepted a wrong md5"
fi
echo "cli: ok"
