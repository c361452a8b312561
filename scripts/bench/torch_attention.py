#!/usr/bin/env python3
"""PyTorch's scaled-dot-product attention at a ViT's shapes, timed the way `minidl bench attention`
times ours (per call: CUDA events around 20 back-to-back calls, median of --repeat spans, after a
warm-up), so scripts/gpu/attention.sh can set the two side by side.

Two figures per backend (flash, and the default dispatch):
  kernel:  F.scaled_dot_product_attention forward + backward on contiguous (N, H, T, hd) q, k, v;
  packed:  the same from a packed (N, T, 3D) projection as nn.MultiheadAttention / timm feed it
           (views of qkv, the output transposed back to (N, T, D)), which is what our op takes.
"""
import argparse
import csv
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

CALLS = 20


def time_ms(fn, repeat):
    fn()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(repeat):
        torch.cuda._sleep(2_000_000)  # queue ahead of the GPU, as minidl's stall kernel
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(CALLS):
            fn()
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) / CALLS)
    return statistics.median(per_call)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--width", type=int, default=384)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    ap.add_argument("--causal", action="store_true", help="is_causal=True (a language model's mask)")
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--csv")
    a = ap.parse_args()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
    n, t, d, h = a.batch, a.tokens, a.width, a.heads
    hd = d // h
    dev = "cuda"
    qkv = (torch.rand(n, t, 3 * d, device=dev) * 2 - 1).to(dtype).requires_grad_()
    q, k, v = (torch.rand(n, h, t, hd, device=dev).to(dtype).requires_grad_() for _ in range(3))
    grad_heads = torch.full((n, h, t, hd), 0.01, device=dev, dtype=dtype)
    grad_tokens = torch.full((n, t, d), 0.01, device=dev, dtype=dtype)

    def kernel():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=a.causal)
        torch.autograd.grad(out, (q, k, v), grad_heads)  # no .grad accumulation to time

    def packed():
        qq, kk, vv = qkv.view(n, t, 3, h, hd).permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=a.causal).transpose(1, 2).reshape(n, t, d)
        torch.autograd.grad(out, qkv, grad_tokens)

    def forward_only():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=a.causal)

    rows = []
    print(f"torch {torch.__version__} SDPA: batch {n}, {t} tokens, width {d}, {h} heads, {a.dtype}"
          f"{', causal' if a.causal else ''}; "
          f"median of {a.repeat} spans of {CALLS} calls")
    backends = [("flash", [SDPBackend.FLASH_ATTENTION]), ("efficient", [SDPBackend.EFFICIENT_ATTENTION]),
                ("math", [SDPBackend.MATH]), ("default", None)]
    for name, chosen in backends:
        try:
            ctx = sdpa_kernel(chosen) if chosen else torch.autocast("cuda", enabled=False)
            with ctx:
                f = time_ms(forward_only, a.repeat)
                fb = time_ms(kernel, a.repeat)
                pk = time_ms(packed, a.repeat)
        except RuntimeError as e:
            print(f"  {name:9s}: not available here ({str(e).splitlines()[0]})")
            continue
        print(f"  {name:9s}: forward {f:8.4f} ms   forward+backward {fb:8.4f} ms   from packed qkv {pk:8.4f} ms")
        rows += [(f"torch_{name}", "forward", f), (f"torch_{name}", "forward+backward", fb),
                 (f"torch_{name}", "packed forward+backward", pk)]
    if a.csv:
        with open(a.csv, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["impl", "part", "ms"])
            w.writerows(rows)


if __name__ == "__main__":
    main()
