#!/usr/bin/env python3
"""PyTorch's cuDNN convolutions at ResNet-9's shapes (batch 512, 3x3, padding 1, fp32 NCHW), timed
the way `minidl bench conv --device cuda` times ours, so the two can be set side by side
(scripts/gpu/conv.sh does that).

Each direction is timed on its own: forward is F.conv2d; backward-data and backward-filter are
aten.convolution_backward with only that output requested, which is the call autograd makes.
torch.backends.cudnn.benchmark = True (a timed algorithm search per shape, as PyTorch users do
for speed); TF32 on and off; cudnn.deterministic on and off (on: the search is limited to
deterministic algorithms). Per call: CUDA events around 20 back-to-back calls, median of --repeat
such spans, after one warm-up call that runs the search.

--depthwise MINIDL_CSV: instead, the depthwise convolutions `minidl bench conv --depthwise --csv`
timed (their shapes read from its CSV, so both sides run the same list), with groups = channels,
padding k // 2, in --dtype (bf16) channels_last at --batch (512), cudnn.benchmark on and
deterministic off (PyTorch's fastest), TF32 as PyTorch's default; written with the same columns.
"""
import argparse
import csv
import statistics
import sys

import torch
import torch.nn.functional as F

# (in_channels, out_channels, height = width, times per training step)
SHAPES = [(3, 64, 32, 1), (64, 128, 32, 1), (128, 128, 16, 2), (128, 256, 16, 1), (256, 512, 8, 1), (512, 512, 4, 2)]
BATCH = 512
CALLS = 20


def time_ms(fn, repeat):
    fn()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(CALLS):
            fn()
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) / CALLS)
    return statistics.median(per_call)


def depthwise(args):
    """The depthwise shapes of minidl's CSV, timed in PyTorch; rows with the same columns."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    torch.backends.cudnn.deterministic = False
    with open(args.depthwise) as f:
        shapes = {}
        for r in csv.DictReader(f):
            shapes.setdefault(r["shape"], r)
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}; "
          f"depthwise, batch {args.batch}, {args.dtype} channels_last, cudnn.benchmark on; per call: median of "
          f"{args.repeat} spans of {CALLS} calls")
    print(f"{'model':12s} {'shape':20s} | {'fwd ms':>8s} {'bwd_d ms':>8s} {'bwd_f ms':>8s} | {'all ms':>8s}")
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    cl = torch.channels_last
    for label, r in shapes.items():
        c, hw, k, stride = int(r["c"]), int(r["hw"]), int(r["k"]), int(r["stride"])
        pad = k // 2
        x = (torch.rand(args.batch, c, hw, hw, device="cuda", generator=gen) * 2 - 1).to(dtype).contiguous(memory_format=cl)
        w = (torch.rand(c, 1, k, k, device="cuda", generator=gen) * 2 - 1).to(dtype).contiguous(memory_format=cl)
        y = F.conv2d(x, w, stride=stride, padding=pad, groups=c)
        dy = (torch.rand(y.shape, device="cuda", generator=gen) * 2 - 1).to(dtype).contiguous(memory_format=cl)

        def backward(mask):
            return lambda: torch.ops.aten.convolution_backward(
                dy, x, w, None, [stride, stride], [pad, pad], [1, 1], False, [0, 0], c, mask)

        ms = (time_ms(lambda: F.conv2d(x, w, stride=stride, padding=pad, groups=c), args.repeat),
              time_ms(backward([True, False, False]), args.repeat), time_ms(backward([False, True, False]), args.repeat))
        print(f"{r['model']:12s} {label:20s} | {ms[0]:8.4f} {ms[1]:8.4f} {ms[2]:8.4f} | {sum(ms):8.4f}")
        for direction, t in zip(("fwd", "bwd_data", "bwd_filter"), ms):
            rows.append(["torch", r["model"], label, c, hw, k, stride, r["count"], direction, t, r["floor_ms"],
                         r["all_floor_ms"], ""])
        del x, w, y, dy
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["impl", "model", "shape", "c", "hw", "k", "stride", "count", "direction", "ms", "floor_ms",
                          "all_floor_ms", "algorithms"])
            out.writerows(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--csv", help="write one row per measurement here")
    parser.add_argument("--depthwise", metavar="MINIDL_CSV",
                        help="time the depthwise shapes of this `minidl bench conv --depthwise` CSV instead")
    parser.add_argument("--batch", type=int, default=512, help="--depthwise: batch size")
    parser.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16", help="--depthwise: dtype")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_conv.py: no CUDA device visible to PyTorch")
    torch.backends.cudnn.benchmark = True
    if args.depthwise:
        return depthwise(args)
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}; "
          f"batch {BATCH}, per call: median of {args.repeat} spans of {CALLS} calls")
    settings = [(False, False), (False, True), (True, False), (True, True)]  # the default last
    rows, results = [], {}
    gen = torch.Generator(device="cuda").manual_seed(0)
    for c, o, hw, count in SHAPES:
        x = torch.rand(BATCH, c, hw, hw, device="cuda", generator=gen) * 2 - 1
        w = torch.rand(o, c, 3, 3, device="cuda", generator=gen) * 2 - 1
        dy = torch.rand(BATCH, o, hw, hw, device="cuda", generator=gen) * 2 - 1

        def backward(mask):
            return lambda: torch.ops.aten.convolution_backward(
                dy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, mask)

        for tf32, det in settings:
            torch.backends.cudnn.allow_tf32 = tf32
            torch.backends.cudnn.deterministic = det
            results[(c, o, hw, tf32, det)] = (time_ms(lambda: F.conv2d(x, w, padding=1), args.repeat),
                                              time_ms(backward([True, False, False]), args.repeat),
                                              time_ms(backward([False, True, False]), args.repeat))
        del x, w, dy
    steps = {}
    for tf32, det in settings:
        print(f"\nTF32 {'on' if tf32 else 'off'}, deterministic {'on' if det else 'off'}")
        print(f"{'shape':20s} {'GFLOP':>6s} | {'fwd ms':>8s} {'TFLOP/s':>7s} | {'bwd_d ms':>8s} {'TFLOP/s':>7s} | "
              f"{'bwd_f ms':>8s} {'TFLOP/s':>7s}")
        step_ms = 0.0
        for c, o, hw, count in SHAPES:
            fwd, bd, bf = results[(c, o, hw, tf32, det)]
            gflop = 2.0 * BATCH * o * hw * hw * c * 9 / 1e9
            label = f"{c}->{o} @{hw}x{hw} k3"
            print(f"{label:20s} {gflop:6.2f} | {fwd:8.4f} {gflop / fwd:7.1f} | {bd:8.4f} {gflop / bd:7.1f} | "
                  f"{bf:8.4f} {gflop / bf:7.1f}")
            step_ms += count * (fwd + (0.0 if c == 3 else bd) + bf)
            for direction, ms in (("fwd", fwd), ("bwd_data", bd), ("bwd_filter", bf)):
                rows.append(["torch", label, direction, int(tf32), int(det), ms, gflop / ms, ""])
        steps[(tf32, det)] = step_ms
    print("\none ResNet-9 training step's convolutions (repeated layers counted):")
    for tf32, det in settings:
        print(f"  TF32 {'on' if tf32 else 'off':3s} deterministic {'on' if det else 'off':3s}: {steps[(tf32, det)]:7.2f} ms")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["impl", "shape", "direction", "tf32", "deterministic", "ms", "tflops", "algorithms"])
            out.writerows(rows)


if __name__ == "__main__":
    main()
