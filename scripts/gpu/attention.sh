#!/usr/bin/env bash
# Self-attention speed on the GPU, minidl beside PyTorch's SDPA (flash), in one device run.
#   scripts/gpu/attention.sh BIN_DIR OUT_DIR
# BIN_DIR holds the built `minidl`. Runs `minidl bench attention` and scripts/bench/torch_attention.py
# at the ViT config's shapes (batch 512, 64 tokens, width 384, 6 heads, bf16), keeps both outputs
# and CSVs in OUT_DIR, and prints minidl's forward+backward against flash's with the ratio (the
# target: minidl within 2x of flash). Exits non-zero if either benchmark fails.
set -euo pipefail
bin_dir=${1:?usage: attention.sh BIN_DIR OUT_DIR}
out=${2:?usage: attention.sh BIN_DIR OUT_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
shape=(--batch 512 --tokens 64 --width 384 --heads 6 --dtype bf16)

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true
echo "== minidl bench attention ${shape[*]}"
"$bin_dir/minidl" bench attention "${shape[@]}" --csv "$out/attention_minidl.csv" | tee "$out/attention_minidl.txt"
echo "== scripts/bench/torch_attention.py ${shape[*]}"
python3 "$root/scripts/bench/torch_attention.py" "${shape[@]}" --csv "$out/attention_torch.csv" |
  tee "$out/attention_torch.txt"

echo "== side by side (ms per forward+backward; minidl/flash <= 2 is the target)"
python3 - "$out/attention_minidl.csv" "$out/attention_torch.csv" <<'PY'
import csv, sys

def load(path):
    with open(path) as f:
        return {(r["impl"], r["part"]): float(r["ms"]) for r in csv.DictReader(f)}

rows = {**load(sys.argv[1]), **load(sys.argv[2])}
ours = rows[("minidl", "forward+backward")]
op = rows[("minidl", "op forward+backward")]
print(f"  minidl batched-GEMM path {rows[('minidl_gemm', 'forward+backward')]:.4f} ms, the op's kernels {ours:.4f} ms")
for impl in ("torch_flash", "torch_default"):
    if (impl, "forward+backward") not in rows:
        print(f"  {impl}: not measured")
        continue
    kernel, packed = rows[(impl, "forward+backward")], rows[(impl, "packed forward+backward")]
    print(f"  minidl kernels {ours:.4f} ms vs {impl} kernel {kernel:.4f} ms: minidl/{impl} = {ours / kernel:.2f}")
    print(f"  minidl op      {op:.4f} ms vs {impl} from packed qkv {packed:.4f} ms: ratio {op / packed:.2f}")
PY
