#!/usr/bin/env bash
# Self-attention speed on the GPU, minidl beside PyTorch's SDPA (flash), in one device run.
#   scripts/gpu/attention.sh BIN_DIR OUT_DIR [SHAPE...]
# BIN_DIR holds the built `minidl`. Runs `minidl bench attention` and scripts/bench/torch_attention.py
# at SHAPE (their common options; default the ViT config's: batch 512, 64 tokens, width 384, 6
# heads, bf16; scripts/gpu/gpt2.sh passes GPT-2's), keeps both outputs and CSVs in OUT_DIR, and
# prints minidl's forward+backward against flash's with the ratio (the targets: within 2x of flash
# at the ViT's shape, 1.5x at GPT-2's). Exits non-zero if either benchmark fails.
set -euo pipefail
bin_dir=${1:?usage: attention.sh BIN_DIR OUT_DIR [SHAPE...]}
out=${2:?usage: attention.sh BIN_DIR OUT_DIR [SHAPE...]}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
shape=(--batch 512 --tokens 64 --width 384 --heads 6 --dtype bf16)
[ $# -gt 2 ] && shape=("${@:3}")

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true
echo "== minidl bench attention ${shape[*]}"
"$bin_dir/minidl" bench attention "${shape[@]}" --csv "$out/attention_minidl.csv" | tee "$out/attention_minidl.txt"
echo "== scripts/bench/torch_attention.py ${shape[*]}"
python3 "$root/scripts/bench/torch_attention.py" "${shape[@]}" --csv "$out/attention_torch.csv" |
  tee "$out/attention_torch.txt"

echo "== side by side (ms per forward+backward)"
python3 - "$out/attention_minidl.csv" "$out/attention_torch.csv" <<'PY'
import csv, sys

def load(path):
    with open(path) as f:
        return {(r["impl"], r["part"]): float(r["ms"]) for r in csv.DictReader(f)}

rows = {**load(sys.argv[1]), **load(sys.argv[2])}
ours = rows[("minidl", "forward+backward")]
op = rows[("minidl", "op forward+backward")]
print(f"  minidl batched-GEMM path {rows[('minidl_gemm', 'forward+backward')]:.4f} ms, the op's kernels {ours:.4f} ms")
if ("minidl_flash", "forward+backward") in rows:
    print(f"  (the op's kernels are the flash kernels: {rows[('minidl_flash', 'forward+backward')]:.4f} ms)")
for impl in ("torch_flash", "torch_default"):
    if (impl, "forward+backward") not in rows:
        print(f"  {impl}: not measured")
        continue
    kernel, packed = rows[(impl, "forward+backward")], rows[(impl, "packed forward+backward")]
    print(f"  minidl kernels {ours:.4f} ms vs {impl} kernel {kernel:.4f} ms: minidl/{impl} = {ours / kernel:.2f}")
    print(f"  minidl op      {op:.4f} ms vs {impl} from packed qkv {packed:.4f} ms: ratio {op / packed:.2f}")
PY
