#!/usr/bin/env python3
"""The PyTorch twin of a minidl config, timed: the model built from the same JSON
(model_from_json.py, the same parameter names and count), the config's optimizer, bf16 autocast
and channels_last as minidl's "auto" trains on these GPUs, eager and torch.compile.

One training step is: forward under autocast, cross-entropy with the config's label smoothing in
float32, backward, the optimizer step (SGD or AdamW, foreach, as PyTorch picks by default on CUDA),
gradient clipping when the config has it. Timed with CUDA events over --steps steps after
--warmup (three times as many for torch.compile, whose first steps compile); inputs are random
normal images (the step time does not depend on pixel values), or for a language model ("tokens"
data) random ids of (batch, seq_len) with random targets and the loss over every token.

Prints one line per mode and writes a JSON file: {"config", "torch", "device", "parameters",
"eager": {"ms_per_step", ...}, "compile": {...}}.

usage: bench_twin.py --config configs/resnet18.json --out twin.json [--steps 50] [--warmup 10]
                     [--no-compile] [--batch-size N] [--precision bf16|fp32] [--contiguous]
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_from_json as mfj  # noqa: E402


def token_seq_len(config):
    """A language model's window (data.seq_len of a "tokens" config), else 0."""
    data = config.get("data", {})
    return data.get("seq_len", 0) if data.get("format") == "tokens" else 0


def time_mode(args, config, compiled):
    torch.manual_seed(config.get("seed", 0))
    model = mfj.build_model(config).to("cuda")
    fmt = torch.contiguous_format if args.contiguous else torch.channels_last
    model = model.to(memory_format=fmt)
    opt, _ = mfj.build_optimizer(config, model)
    params = list(model.parameters())
    run = torch.compile(model) if compiled else model
    dtype = {"bf16": torch.bfloat16, "fp32": None}[args.precision]
    smoothing = config.get("loss", {}).get("label_smoothing", 0.0)
    clip = config.get("grad_clip", 0.0)
    bs = config["batch_size"]
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    seq_len = token_seq_len(config)
    if seq_len:
        vocab = config["model"]["layers"][0]["num_embeddings"]
        batches = [(torch.randint(0, vocab, (bs, seq_len), device="cuda", generator=gen),
                    torch.randint(0, vocab, (bs, seq_len), device="cuda", generator=gen)) for _ in range(4)]
    else:
        batches = [(torch.randn(bs, 3, 32, 32, device="cuda", generator=gen).contiguous(memory_format=fmt),
                    torch.randint(0, 10, (bs,), device="cuda", generator=gen)) for _ in range(4)]

    def step(x, y):
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
            out = run(x)
        # A language model's (B, T, V) logits: one prediction per token, as nanoGPT flattens them.
        loss = F.cross_entropy(out.float().flatten(0, -2), y.flatten(), label_smoothing=smoothing)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()

    warmup = args.warmup * (3 if compiled else 1)
    for i in range(warmup):
        step(*batches[i % len(batches)])
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for i in range(args.steps):
        step(*batches[i % len(batches)])
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end) / args.steps
    res = {"ms_per_step": ms, "images_per_s": bs * 1000.0 / ms, "steps": args.steps, "warmup": warmup,
           "tokens_per_s": bs * (seq_len or 1) * 1000.0 / ms,
           "wall_ms_per_step": 1000.0 * (time.perf_counter() - t0) / args.steps,
           "max_memory_allocated_bytes": torch.cuda.max_memory_allocated()}
    label = "compile" if compiled else "eager"
    rate = f"{res['tokens_per_s']:.0f} tokens/s" if seq_len else f"{res['images_per_s']:.0f} images/s"
    print(f"time ({label}): {ms:.3f} ms/step, {rate}, peak "
          f"{res['max_memory_allocated_bytes'] / 1e9:.2f} GB (batch {bs}, {args.steps} steps after {warmup})",
          flush=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--contiguous", action="store_true", help="NCHW instead of channels_last")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_twin.py: no CUDA GPU here")
    with open(args.config) as f:
        config = json.load(f)
    if args.batch_size:
        config["batch_size"] = args.batch_size
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = bool(config.get("allow_tf32", True))
    torch.backends.cudnn.allow_tf32 = bool(config.get("allow_tf32", True))
    result = {"config": os.path.abspath(args.config), "torch": torch.__version__,
              "device": torch.cuda.get_device_name(), "batch_size": config["batch_size"],
              "precision": args.precision, "memory_format": "contiguous" if args.contiguous else "channels_last",
              "parameters": sum(p.numel() for p in mfj.build_model(config).parameters())}
    print(f"# PyTorch {torch.__version__} on {result['device']}; {args.config}: {result['parameters']} parameters",
          flush=True)
    result["eager"] = time_mode(args, config, False)
    if not args.no_compile:
        result["compile"] = time_mode(args, config, True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
