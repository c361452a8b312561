#!/usr/bin/env python3
"""PyTorch's normalization layers at the docs/perf/anchors.md shapes, measured the way docs/perf/anchors.md measured
them, so `minidl bench norm` can be set beside figures from the same machine and run
(scripts/gpu/norm.sh does that).

nn.BatchNorm2d(C), nn.GroupNorm(32, C) (1 group when C is not a multiple of 32) and
nn.LayerNorm([C, H, W]) in training mode, x ~ N(5, 3^2); plus nn.LayerNorm(D) over the last dim at
the transformer shapes. fp32 NCHW by default (docs/perf/anchors.md's mode); --dtype bf16|fp16 runs
x, dy and the layers' I/O in that type (the parameters stay fp32, as under autocast, where
PyTorch's norm kernels take half input with fp32 weights; a layer that refuses mixed types runs
with its parameters in the half type, and the JSON says which) and --channels-last gives the 4-d x and
dy in torch.channels_last, as `minidl bench norm --dtype D --memory-format channels_last` runs. Each module call is timed with CUDA events around it (a
synchronize after each), median of --reps after --warmup calls; backward = (forward + backward)
- forward, both medians of such calls.

--volumes: instead, nn.GroupNorm(8, C) and nn.BatchNorm3d(C), each followed by nn.ReLU, at a 128^3
3-D UNet's shapes (`minidl bench norm --volumes`'s), with --channels-last meaning
torch.channels_last_3d; --compile runs each module through torch.compile (PyTorch's fused kernels
for the norm + ReLU pair) instead of eagerly.
"""
import argparse
import json
import os
import statistics
import sys

import torch
from torch import nn

# The shapes minidl bench norm times: docs/perf/anchors.json's.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "perf", "anchors.json")) as f:
    _ANCHORS = json.load(f)["norm"]
SHAPES = [(s["n"], s["c"], s["h"], s["w"]) for s in _ANCHORS["shapes"]]
TRANSFORMER = [(s["rows"], s["d"]) for s in _ANCHORS["layer_norm_last_dim"]]
# A 128^3 UNet's activations, one volume: bench/bench_norm.cpp's kVolumeShapes.
VOLUMES = [(1, 32, 128), (1, 64, 64), (1, 128, 32), (1, 256, 16)]


def time_ms(fn, reps, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def measure(module, shape, reps, warmup, gen, dtype, channels_last):
    fmt = torch.contiguous_format
    if channels_last and len(shape) in (4, 5):
        fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    x = (torch.randn(shape, device="cuda", generator=gen) * 3 + 5).to(dtype=dtype, memory_format=fmt)
    x.requires_grad_(True)
    dy = torch.randn(shape, device="cuda", generator=gen).to(dtype=dtype, memory_format=fmt)

    def forward():
        module(x)

    def forward_backward():
        module(x).backward(dy)

    fwd = time_ms(forward, reps, warmup)
    both = time_ms(forward_backward, reps, warmup)
    return fwd, both - fwd


def measure_layer(module, shape, args, gen, dtype):
    """fwd ms, bwd ms and the parameters' dtype: fp32 where the layer takes a half input with them."""
    module = module.cuda().train()
    run = torch.compile(module) if args.compile else module
    try:
        return (*measure(run, shape, args.reps, args.warmup, gen, dtype, args.channels_last), "fp32")
    except RuntimeError:
        if dtype == torch.float32:
            raise
        module = module.to(dtype)
        run = torch.compile(module) if args.compile else module
        return (*measure(run, shape, args.reps, args.warmup, gen, dtype, args.channels_last), args.dtype)


def measure_volumes(args, gen, dtype):
    results = []
    for n, c, side in VOLUMES:
        shape = (n, c, side, side, side)
        for name, norm in (("GroupNorm", nn.GroupNorm(8, c)), ("BatchNorm3d", nn.BatchNorm3d(c))):
            fwd, bwd, params = measure_layer(nn.Sequential(norm, nn.ReLU()), shape, args, gen, dtype)
            label = f"({n},{c},{side},{side},{side})" + (" G8" if name == "GroupNorm" else "") + " +ReLU"
            results.append({"layer": name, "shape": label, "fwd_ms": fwd, "bwd_ms": bwd, "params": params})
            print(f"{name:11s} {label:30s} {fwd:8.4f} {bwd:8.4f}", flush=True)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", help="write every measurement here")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--volumes", action="store_true", help="the 3-D UNet's GroupNorm and BatchNorm3d shapes")
    parser.add_argument("--compile", action="store_true", help="torch.compile each module")
    args = parser.parse_args()
    dtype = DTYPES[args.dtype]
    if not torch.cuda.is_available():
        sys.exit("torch_norm.py: no CUDA device visible to PyTorch")
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}; "
          f"{args.dtype}, {'channels_last' if args.channels_last else 'contiguous'}; "
          f"{'torch.compile' if args.compile else 'eager'}; "
          f"median of {args.reps} calls after {args.warmup} warm-ups, backward = (fwd+bwd) - fwd")
    print(f"{'layer':11s} {'shape':22s} {'fwd ms':>8s} {'bwd ms':>8s}")
    gen = torch.Generator(device="cuda").manual_seed(0)
    results = measure_volumes(args, gen, dtype) if args.volumes else []
    for n, c, h, w in [] if args.volumes else SHAPES:
        groups = 32 if c % 32 == 0 else 1
        layers = [("BatchNorm2d", nn.BatchNorm2d(c)), ("GroupNorm", nn.GroupNorm(groups, c)),
                  ("LayerNorm", nn.LayerNorm([c, h, w]))]
        for name, module in layers:
            fwd, bwd, params = measure_layer(module, (n, c, h, w), args, gen, dtype)
            shape = f"({n},{c},{h},{w})" + (f" G{groups}" if name == "GroupNorm" else "")
            results.append({"layer": name, "shape": shape, "fwd_ms": fwd, "bwd_ms": bwd, "params": params})
            print(f"{name:11s} {shape:22s} {fwd:8.4f} {bwd:8.4f}", flush=True)
    for rows, d in [] if args.volumes else TRANSFORMER:
        fwd, bwd, params = measure_layer(nn.LayerNorm(d), (rows, d), args, gen, dtype)
        shape = f"({rows},{d}) last"
        results.append({"layer": "LayerNorm", "shape": shape, "fwd_ms": fwd, "bwd_ms": bwd, "params": params})
        print(f"{'LayerNorm':11s} {shape:22s} {fwd:8.4f} {bwd:8.4f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "reps": args.reps,
                       "warmup": args.warmup, "dtype": args.dtype, "channels_last": args.channels_last,
                       "volumes": args.volumes, "compile": args.compile,
                       "results": results}, f, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
