#!/usr/bin/env python3
"""bf16 and fp16 safetensors files between PyTorch and minidl, both ways.

  half_safetensors.py write DIR   writes DIR/torch_halves.safetensors: a float32 "source" and
                                  PyTorch's own source.to(torch.bfloat16) ("bf16") and
                                  source.to(torch.float16) ("f16")
  half_safetensors.py check DIR   loads DIR/minidl_halves.safetensors (written by minidl's
                                  "[half][torch]" test from the same source) with
                                  safetensors.torch and checks dtypes and bits against PyTorch

scripts/gpu/half_safetensors.sh runs write, the minidl test, then check. The source holds every
bf16 and every fp16 value as float32 (exact), the midpoints between neighbouring values of both
formats (rounding ties) with their float32 neighbours, and 2^20 random float32 bit patterns.
NaNs are left out on purpose: PyTorch writes one canonical NaN, minidl keeps a NaN's sign and
payload (docs/precision.md).
"""
import sys

import torch
from safetensors.torch import load_file, save_file


def source():
    patterns = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    parts = []
    for half in (torch.bfloat16, torch.float16):
        values = patterns.view(half).to(torch.float32)
        finite = values[torch.isfinite(values)].to(torch.float64).unique()  # sorted
        mid = ((finite[1:] + finite[:-1]) / 2).to(torch.float32)  # exact: one bit more than the format
        parts += [values, mid, torch.nextafter(mid, torch.zeros_like(mid)),
                  torch.nextafter(mid, torch.full_like(mid, float("inf")))]
    g = torch.Generator().manual_seed(0)
    bits = torch.randint(0, 2**32, (1 << 20,), generator=g, dtype=torch.int64) - 2**31
    parts.append(bits.to(torch.int32).view(torch.float32))
    x = torch.cat(parts)
    return x[~torch.isnan(x)].contiguous()


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and bool((a.view(torch.int16) == b.view(torch.int16)).all())


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "check"):
        sys.exit(__doc__)
    mode, folder = sys.argv[1], sys.argv[2]
    if mode == "write":
        x = source()
        save_file({"source": x, "bf16": x.to(torch.bfloat16), "f16": x.to(torch.float16)},
                  f"{folder}/torch_halves.safetensors")
        print(f"half_safetensors: wrote {x.numel()} values to {folder}/torch_halves.safetensors")
        return
    t = load_file(f"{folder}/minidl_halves.safetensors")
    x = t["source"]
    ok = x.dtype == torch.float32 and bool((x.view(torch.int32) == source().view(torch.int32)).all())
    print(f"half_safetensors: source float32 {'PASS' if ok else 'FAIL'} ({x.numel()} values)")
    for name, half in (("bf16", torch.bfloat16), ("f16", torch.float16)):
        good = same_bits(t[name], x.to(half))
        print(f"half_safetensors: {name} as {t[name].dtype} {'PASS' if good else 'FAIL'}")
        ok = ok and good
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
