#!/usr/bin/env bash
# A text file to a language model's token files with GPT-2's tokenizer:
#   scripts/tokenize.sh TEXT_FILE OUT_DIR [--val-fraction F]
# writes OUT_DIR/train.bin and OUT_DIR/val.bin (llm.c's format; the first F of the tokens, 0.1 by
# default, are the validation split). Fetches the tokenizer's vocabulary first if it is missing
# (scripts/fetch-gpt2-tokenizer.sh, checksummed) and uses the built minidl (BUILD_DIR, default
# build/).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
text=${1:?usage: tokenize.sh TEXT_FILE OUT_DIR [--val-fraction F]}
out=${2:?usage: tokenize.sh TEXT_FILE OUT_DIR [--val-fraction F]}
shift 2
bash "$root/scripts/fetch-gpt2-tokenizer.sh" "$build/gpt2-tokenizer" >/dev/null
exec "$build/minidl" tokenize "$text" "$out" --tokenizer "$build/gpt2-tokenizer" "$@"
