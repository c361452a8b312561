#!/usr/bin/env python3
"""PyTorch reference for minidl's ResNet-9: the same JSON config, the same recipe, eager fp32 NCHW.

The model is built by walking config["model"]["layers"] (model_from_json.py, shared with the
parity check), so it is exactly the network minidl trains, under the same parameter names. The
recipe follows the config: SGD (Nesterov, weight decay) on the mean cross-entropy with label
smoothing, the piecewise-linear lr schedule per step, batch_size, epochs; TF32 for convolutions
as config["allow_tf32"]. Lr 0.4 with weight decay 5e-4 on the MEAN loss equals the DAWNBench
formulation of docs/perf/anchors.md (lr 0.4/512, weight decay 5e-4*512 on the SUMMED loss).

Data: the decoded binary CIFAR-10 (data_batch_1..5.bin, test_batch.bin) loaded once into GPU
memory, normalized with config["data"] mean/std (CIFAR-10's by default). Augmentation runs on the
GPU once per epoch, as minidl's (data/augment_kernel.h): random crop with reflect padding, a
horizontal flip with p = 0.5, and cutout (a size x size square at a uniform random center,
clipped at the borders, zeroed after normalization). Full batches only (drop_last), a fresh
shuffle every epoch.

Modes (any combination; results go to one JSON file):
  --time-steps N   N training steps timed with CUDA events after --warmup steps: ms/step,
                   images/s, torch.cuda.max_memory_allocated over those steps.
  --profile        torch.profiler over 10 steps: device time per op category (convolution,
                   batch_norm [every normalization layer], max_pool, elementwise [activations,
                   adds, optimizer], other), attributed by the op that launched each kernel.
  --epochs E       trains E epochs (0: the config's) and reports test accuracy with and without
                   flip TTA, training wall time and evaluation time.

usage: resnet9.py --config configs/resnet9.json --data CIFAR_DIR --out result.json
                  [--time-steps 50] [--profile] [--epochs 0] [--benchmark] [--seed S]
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_from_json as mfj  # noqa: E402

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


def load_cifar10(data_dir, device, mean, std):
    """(train_x, train_y, test_x, test_y) on `device`; images normalized float32 NCHW."""
    def read(names):
        recs = []
        for n in names:
            path = os.path.join(data_dir, n)
            if not os.path.exists(path):
                sys.exit(f"resnet9.py: {path} not found (decode CIFAR-10 with shared/tools/prepare-cifar10.sh)")
            recs.append(np.fromfile(path, dtype=np.uint8).reshape(-1, 3073))
        r = np.concatenate(recs)
        x = torch.from_numpy(r[:, 1:].reshape(-1, 3, 32, 32).copy()).to(device)
        y = torch.from_numpy(r[:, 0].astype(np.int64)).to(device)
        m = torch.tensor(mean, device=device).view(1, 3, 1, 1)
        s = torch.tensor(std, device=device).view(1, 3, 1, 1)
        return (x.float() / 255 - m) / s, y
    train = read([f"data_batch_{i}.bin" for i in range(1, 6)])
    test = read(["test_batch.bin"])
    return train[0], train[1], test[0], test[1]


def augment(x, aug, gen, chunk=10000):
    """One epoch's augmented copy of the normalized images x (N,3,32,32), on x's device."""
    pad, flip, cut = aug.get("crop_padding", 0), aug.get("flip", False), aug.get("cutout", 0)
    mode = aug.get("padding_mode", "reflect")
    n, _, h, w = x.shape
    out = torch.empty_like(x)
    ar_h = torch.arange(h, device=x.device)
    ar_w = torch.arange(w, device=x.device)
    for lo in range(0, n, chunk):
        xb = x[lo:lo + chunk]
        b = xb.shape[0]
        if pad:
            # A zero pad is a black pixel, i.e. -mean/std after normalization.
            if mode == "reflect":
                padded = F.pad(xb, (pad, pad, pad, pad), mode="reflect")
            else:
                black = (-torch.tensor(CIFAR_MEAN, device=x.device) / torch.tensor(CIFAR_STD, device=x.device))
                padded = black.view(1, 3, 1, 1).expand(b, 3, h + 2 * pad, w + 2 * pad).clone()
                padded[:, :, pad:pad + h, pad:pad + w] = xb
            dy = torch.randint(0, 2 * pad + 1, (b,), device=x.device, generator=gen)
            dx = torch.randint(0, 2 * pad + 1, (b,), device=x.device, generator=gen)
        else:
            padded, dy, dx = xb, torch.zeros(b, dtype=torch.long, device=x.device), \
                torch.zeros(b, dtype=torch.long, device=x.device)
        rows = (dy[:, None] + ar_h[None, :])                       # (b, h)
        cols = (dx[:, None] + ar_w[None, :])                       # (b, w)
        if flip:
            flipped = torch.rand(b, device=x.device, generator=gen) < 0.5
            cols = torch.where(flipped[:, None], cols.flip(1), cols)
        wp = padded.shape[3]
        yb = padded.gather(2, rows[:, None, :, None].expand(b, 3, h, wp))
        yb = yb.gather(3, cols[:, None, None, :].expand(b, 3, h, w))
        if cut:
            cy = torch.randint(0, h, (b,), device=x.device, generator=gen)
            cx = torch.randint(0, w, (b,), device=x.device, generator=gen)
            my = (ar_h[None, :] >= (cy - cut // 2)[:, None]) & (ar_h[None, :] < (cy - cut // 2 + cut)[:, None])
            mx = (ar_w[None, :] >= (cx - cut // 2)[:, None]) & (ar_w[None, :] < (cx - cut // 2 + cut)[:, None])
            yb = yb.masked_fill((my[:, :, None] & mx[:, None, :])[:, None], 0.0)
        out[lo:lo + b] = yb
    return out


# --amp / --channels-last: PyTorch's own advice for speed (torch.autocast, GradScaler for fp16,
# channels_last model and inputs); main() sets these once.
AMP = {"dtype": None, "scaler": None, "channels_last": False}


def train_step(model, opt, x, y, smoothing):
    if AMP["channels_last"]:
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=AMP["dtype"], enabled=AMP["dtype"] is not None):
        out = model(x)
        loss = F.cross_entropy(out, y, label_smoothing=smoothing)
    opt.zero_grad(set_to_none=True)
    if AMP["scaler"] is not None:
        AMP["scaler"].scale(loss).backward()
        AMP["scaler"].step(opt)
        AMP["scaler"].update()
    else:
        loss.backward()
        opt.step()
    return loss, out


def evaluate(model, x, y, batch=1000):
    model.eval()
    plain = tta = 0
    with torch.no_grad():
        for lo in range(0, x.shape[0], batch):
            xb, yb = x[lo:lo + batch], y[lo:lo + batch]
            logits = model(xb)
            plain += int((logits.argmax(1) == yb).sum())
            tta += int(((logits + model(xb.flip(3))).argmax(1) == yb).sum())
    model.train()
    return 100.0 * plain / x.shape[0], 100.0 * tta / x.shape[0]


def fixed_batches(args, config, device, count):
    """`count` augmented training batches to cycle through while timing/profiling (random
    normal images when no data folder is given: the step time does not depend on pixel values)."""
    bs = config["batch_size"]
    gen = torch.Generator(device=device)
    gen.manual_seed(args.seed)
    if args.data:
        tx, ty, _, _ = load_cifar10(args.data, device, *norm_of(config))
        tx = augment(tx[:bs * count], config.get("data", {}).get("augment", {}), gen)
        ty = ty[:bs * count]
    else:
        tx = torch.randn(bs * count, 3, 32, 32, device=device, generator=gen)
        ty = torch.randint(0, 10, (bs * count,), device=device, generator=gen)
    return [(tx[i * bs:(i + 1) * bs], ty[i * bs:(i + 1) * bs]) for i in range(count)]


def norm_of(config):
    d = config.get("data", {})
    return tuple(d.get("mean", CIFAR_MEAN)), tuple(d.get("std", CIFAR_STD))


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def time_steps(args, config, model, opt, base_lr, smoothing, device):
    batches = fixed_batches(args, config, device, 16)
    mfj.set_lr(opt, base_lr * 0.5)  # any nonzero lr; the time does not depend on it
    for i in range(args.warmup):
        train_step(model, opt, *batches[i % len(batches)], smoothing)
    sync(device)
    cuda = device == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    t0 = time.perf_counter()
    for i in range(args.time_steps):
        train_step(model, opt, *batches[i % len(batches)], smoothing)
    if cuda:
        end.record()
    sync(device)
    ms = (start.elapsed_time(end) if cuda else 1000.0 * (time.perf_counter() - t0)) / args.time_steps
    bs = config["batch_size"]
    res = {"steps": args.time_steps, "warmup": args.warmup, "batch_size": bs, "ms_per_step": ms,
           "images_per_s": bs * 1000.0 / ms,
           "max_memory_allocated_bytes": torch.cuda.max_memory_allocated() if cuda else None,
           "max_memory_reserved_bytes": torch.cuda.max_memory_reserved() if cuda else None,
           "note": "forward + loss + backward + optimizer step on pre-augmented batches already on the GPU; "
                   "peak memory over the timed steps (model, optimizer state, 16 batches, activations, "
                   "cuDNN workspaces)"}
    peak = f"{res['max_memory_allocated_bytes'] / 1e9:.2f} GB" if cuda else "n/a on the CPU"
    print(f"time: {ms:.3f} ms/step, {res['images_per_s']:.0f} images/s, peak allocated "
          f"{peak} (batch {bs}, {args.time_steps} steps "
          f"after {args.warmup} warm-up)", flush=True)
    return res


CATEGORIES = ("convolution", "batch_norm", "max_pool", "elementwise", "other")
_ELEMENTWISE = ("relu", "threshold", "gelu", "add", "sub", "mul", "div", "neg", "fill", "zero", "copy",
                "clamp", "where", "masked", "foreach", "sqrt", "lerp", "addcmul", "addcdiv", "scale")


def category(op):
    name = op.lower()
    if "conv" in name:
        return "convolution"
    if "batch_norm" in name or "group_norm" in name or "layer_norm" in name:
        return "batch_norm"
    if "max_pool" in name:
        return "max_pool"
    if any(k in name for k in _ELEMENTWISE):
        return "elementwise"
    return "other"


def profile_steps(args, config, model, opt, base_lr, smoothing, device, steps=10):
    from torch.profiler import ProfilerActivity, profile
    batches = fixed_batches(args, config, device, 16)
    mfj.set_lr(opt, base_lr * 0.5)
    for i in range(args.warmup):
        train_step(model, opt, *batches[i % len(batches)], smoothing)
    sync(device)
    cuda = device == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for i in range(steps):
            train_step(model, opt, *batches[i % len(batches)], smoothing)
        sync(device)

    def self_device_us(e):
        if not cuda:  # a CPU smoke run: host time stands in for device time
            return e.self_cpu_time_total if str(e.device_type).endswith("CPU") else 0
        v = getattr(e, "self_device_time_total", None)
        return v if v is not None else getattr(e, "self_cuda_time_total", 0)

    # Each kernel's time counts once, as self time of the CPU op that launched it (so cuDNN's
    # NCHW<->NHWC conversion kernels count under convolution, as in docs/perf/anchors.md).
    per_cat = {c: 0.0 for c in CATEGORIES}
    per_op = {}
    kernel_total = 0.0
    for e in prof.key_averages():
        us = self_device_us(e)
        if str(getattr(e, "device_type", "")).endswith("CPU"):
            if us > 0:
                per_cat[category(e.key)] += us
                per_op[e.key] = per_op.get(e.key, 0.0) + us
        else:
            kernel_total += us
    total = sum(per_cat.values())
    ms = {c: per_cat[c] / 1000.0 / steps for c in CATEGORIES}
    print(f"profile: device time per step {total / 1000.0 / steps:.3f} ms (kernels seen: "
          f"{kernel_total / 1000.0 / steps:.3f} ms), {steps} steps", flush=True)
    print(f"{'category':14s} {'ms/step':>9s} {'share':>7s}")
    for c in CATEGORIES:
        print(f"{c:14s} {ms[c]:9.3f} {100.0 * per_cat[c] / max(total, 1e-9):6.1f}%")
    top = sorted(per_op.items(), key=lambda kv: -kv[1])[:20]
    print("top ops (self device ms/step):")
    for k, us in top:
        print(f"  {us / 1000.0 / steps:8.3f}  {category(k):12s} {k}")
    return {"steps": steps, "device_ms_per_step": total / 1000.0 / steps,
            "kernel_ms_per_step": kernel_total / 1000.0 / steps, "ms_per_step_by_category": ms,
            "top_ops_ms_per_step": {k: us / 1000.0 / steps for k, us in top}}


def train_epochs(args, config, model, opt, base_lr, smoothing, device, epochs):
    if not args.data:
        sys.exit("resnet9.py: --epochs needs --data (the decoded CIFAR-10 folder)")
    tx, ty, vx, vy = load_cifar10(args.data, device, *norm_of(config))
    limit = config.get("data", {}).get("train_limit", 0)
    if limit:
        tx, ty = tx[:limit], ty[:limit]
    bs = config["batch_size"]
    steps_per_epoch = tx.shape[0] // bs
    aug = config.get("data", {}).get("augment", {})
    gen = torch.Generator(device=device)
    gen.manual_seed(args.seed)
    history = []
    sync(device)
    t0 = time.perf_counter()
    step = 0
    for epoch in range(epochs):
        te = time.perf_counter()
        ax = augment(tx, aug, gen)
        perm = torch.randperm(tx.shape[0], device=device, generator=gen)
        loss_sum = torch.zeros((), device=device)
        correct = torch.zeros((), device=device, dtype=torch.long)
        for i in range(steps_per_epoch):
            idx = perm[i * bs:(i + 1) * bs]
            mfj.set_lr(opt, base_lr * mfj.schedule_factor(config, step, steps_per_epoch))
            loss, out = train_step(model, opt, ax[idx], ty[idx], smoothing)
            loss_sum += loss.detach()
            correct += (out.argmax(1) == ty[idx]).sum()
            step += 1
        sync(device)
        h = {"epoch": epoch + 1, "train_loss": float(loss_sum) / steps_per_epoch,
             "train_acc": 100.0 * int(correct) / (steps_per_epoch * bs),
             "lr_end": opt.param_groups[0]["lr"], "epoch_s": time.perf_counter() - te}
        history.append(h)
        print(f"epoch {h['epoch']:3d}  loss {h['train_loss']:.4f}  train acc {h['train_acc']:.2f}%  "
              f"lr {h['lr_end']:.4f}  {h['epoch_s']:.2f}s", flush=True)
    sync(device)
    wall = time.perf_counter() - t0
    te = time.perf_counter()
    acc, acc_tta = evaluate(model, vx, vy)
    sync(device)
    eval_s = time.perf_counter() - te
    print(f"test accuracy {acc:.2f}%, with flip TTA {acc_tta:.2f}%; training {wall:.1f} s "
          f"({epochs} epochs of {steps_per_epoch} steps), evaluation {eval_s:.2f} s", flush=True)
    return {"epochs": epochs, "steps_per_epoch": steps_per_epoch, "test_acc": acc, "test_acc_flip_tta": acc_tta,
            "train_wall_s": wall, "eval_s": eval_s, "history": history,
            "note": "wall time from the first epoch's augmentation to the last step, data already on the GPU"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                     "..", "..", "configs", "resnet9.json"))
    ap.add_argument("--data", default="", help="decoded CIFAR-10 folder (data_batch_*.bin, test_batch.bin)")
    ap.add_argument("--out", required=True, help="JSON file for the results")
    ap.add_argument("--time-steps", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--epochs", type=int, default=None, help="train this many epochs (0: the config's)")
    ap.add_argument("--benchmark", action="store_true", help="torch.backends.cudnn.benchmark = True")
    ap.add_argument("--seed", type=int, default=None, help="default: the config's seed")
    ap.add_argument("--device", default="cuda", help="cuda (the reference), or cpu for a smoke test")
    ap.add_argument("--batch-size", type=int, default=None, help="default: the config's batch_size")
    ap.add_argument("--amp", choices=("none", "bf16", "fp16"), default="none",
                    help="torch.autocast in this dtype (fp16 with a GradScaler)")
    ap.add_argument("--channels-last", action="store_true", help="model and inputs in torch.channels_last")
    ap.add_argument("--compile", choices=("none", "default", "reduce-overhead"), default="none",
                    help="time torch.compile(model, mode=...) (reduce-overhead: with CUDA graphs)")
    args = ap.parse_args()
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("resnet9.py: no CUDA GPU here (--device cpu runs a smoke test)")
    with open(args.config) as f:
        config = json.load(f)
    args.seed = config.get("seed", 0) if args.seed is None else args.seed
    if args.batch_size:
        config["batch_size"] = args.batch_size
    torch.backends.cudnn.allow_tf32 = bool(config.get("allow_tf32", True))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.deterministic = bool(config.get("deterministic", False))
    torch.backends.cudnn.benchmark = args.benchmark
    torch.manual_seed(args.seed)
    model = mfj.build_model(config).to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    AMP["channels_last"] = args.channels_last
    AMP["dtype"] = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.amp]
    AMP["scaler"] = torch.amp.GradScaler("cuda") if args.amp == "fp16" else None
    opt, base_lr = mfj.build_optimizer(config, model)
    smoothing = config.get("loss", {}).get("label_smoothing", 0.0)
    result = {"config": os.path.abspath(args.config), "torch": torch.__version__,
              "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
              "cudnn": torch.backends.cudnn.version(),
              "settings": {"allow_tf32_conv": torch.backends.cudnn.allow_tf32, "allow_tf32_matmul": False,
                           "cudnn_deterministic": torch.backends.cudnn.deterministic,
                           "cudnn_benchmark": args.benchmark,
                           "dtype": "float32" if args.amp == "none" else f"float32 + autocast {args.amp}",
                           "memory_format": "channels_last" if args.channels_last else "NCHW",
                           "seed": args.seed},
              "parameters": sum(p.numel() for p in model.parameters())}
    print(f"# PyTorch {torch.__version__} on {result['device']}, cuDNN {result['cudnn']}; {args.config}: "
          f"{result['parameters']} parameters; settings {result['settings']}", flush=True)
    if args.time_steps:
        timed = model if args.compile == "none" else torch.compile(
            model, mode=None if args.compile == "default" else args.compile)
        result["settings"]["compile"] = args.compile
        result["time"] = time_steps(args, config, timed, opt, base_lr, smoothing, device)
    if args.profile:
        result["profile"] = profile_steps(args, config, model, opt, base_lr, smoothing, device)
    if args.epochs is not None:
        if args.time_steps or args.profile:  # train from a fresh init, not the timed model
            torch.manual_seed(args.seed)
            model = mfj.build_model(config).to(device)
            opt, base_lr = mfj.build_optimizer(config, model)
        result["train"] = train_epochs(args, config, model, opt, base_lr, smoothing, device,
                                       args.epochs or config["epochs"])
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"# wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
