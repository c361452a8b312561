#!/usr/bin/env bash
# An English corpus that installs offline from Debian's archive: the King James Bible (the
# packages bible-kjv and bible-kjv-text, about 4.3 MB of text), printed by its `bible` program
# from Genesis 1:1 to Revelation 22:21 into TEXT_FILE:
#   scripts/corpus-kjv.sh TEXT_FILE
# then `scripts/tokenize.sh TEXT_FILE build/gpt2-text` makes the token files configs/gpt2_124m.json
# reads. Installs the two packages when missing (scripts/install_packages.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: corpus-kjv.sh TEXT_FILE}
bash "$root/scripts/install_packages.sh" bible-kjv bible-kjv-text
mkdir -p "$(dirname "$out")"
bible "gen1:1-rev22:21" >"$out.tmp"
mv "$out.tmp" "$out"
echo "corpus: $(wc -c <"$out") bytes of the King James Bible in $out"
