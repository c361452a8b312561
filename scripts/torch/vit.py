#!/usr/bin/env python3
"""PyTorch twin of minidl's ViT config (configs/vit_cifar10.json): the same model and recipe.

The model is read off the config's layer list: a strided Conv2d patch embedding, a learned
position embedding (trunc_normal_, std from the config), the config's TransformerEncoderLayers as
nn.TransformerEncoderLayer(batch_first=True, norm_first=...) (its self-attention runs
F.scaled_dot_product_attention), the final LayerNorm, mean pooling over tokens (or the class
token) and the Linear head. The recipe follows the config too: AdamW (lr, betas, eps) with weight
decay on parameters of two or more dimensions only (matrices, the patch filters and the position
embedding; never biases or LayerNorm weights), the warm-up + cosine schedule per step, label
smoothing, clip_grad_norm_ at config["grad_clip"], batch_size, epochs, bf16 autocast for
"precision": "bf16" ("auto" or no key: bf16 on a GPU of compute capability 8.0 or later, as minidl
chooses). Data: the decoded CIFAR-10 binaries on the GPU, reflect-pad crop + flip per
epoch (resnet9.py's loader and augmentation, the same as minidl's).

Modes (any combination; results go to one JSON file):
  --time-steps N   N training steps timed with CUDA events after --warmup steps, eager and (with
                   --compile) with torch.compile(model): ms/step, images/s, peak memory.
  --epochs E       trains E epochs (0: the config's) and reports the test accuracy and seconds.

usage: vit.py --config configs/vit_cifar10.json --data CIFAR_DIR --out result.json
              [--time-steps 50] [--compile] [--epochs 0] [--seed S] [--device cuda|cpu]
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import resnet9 as r9  # noqa: E402  (CIFAR-10 loading and the GPU augmentation)


def vit_spec(config):
    """The ViT's shape from the config's layer list; exits naming what does not fit."""
    layers = config["model"]["layers"]
    types = [l["type"] for l in layers]
    want = ["Conv2d", "Tokens", "PositionEmbedding"]
    if types[:3] != want or types[-3:] != ["LayerNorm", "TokenPool", "Linear"]:
        sys.exit(f"vit.py: expected Conv2d, Tokens, PositionEmbedding, TransformerEncoderLayer..., LayerNorm, "
                 f"TokenPool, Linear; got {types}")
    blocks = layers[3:-3]
    if not blocks or any(b["type"] != "TransformerEncoderLayer" for b in blocks):
        sys.exit(f"vit.py: expected TransformerEncoderLayers between the embedding and the head, got {types[3:-3]}")
    conv, pos, pool, head = layers[0], layers[2], layers[-2], layers[-1]
    b = blocks[0]
    return {"patch": conv["kernel_size"], "stride": conv.get("stride", 1), "width": conv["out_channels"],
            "tokens": pos["num_tokens"], "init_std": pos.get("init_std", 0.02),
            "depth": len(blocks), "heads": b["nhead"], "mlp": b.get("dim_feedforward", 2048),
            "dropout": b.get("dropout", 0.1), "activation": b.get("activation", "relu"),
            "eps": b.get("layer_norm_eps", 1e-5), "norm_first": b.get("norm_first", False),
            "final_eps": layers[-3].get("eps", 1e-5), "pool": pool.get("mode", "mean"),
            "classes": head["out_features"]}


class ViT(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, s["width"], s["patch"], s["stride"])
        self.pos_embed = nn.Parameter(torch.empty(1, s["tokens"], s["width"]))
        nn.init.trunc_normal_(self.pos_embed, std=s["init_std"], a=-2.0, b=2.0)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(s["width"], s["heads"], s["mlp"], dropout=s["dropout"],
                                       activation=s["activation"], layer_norm_eps=s["eps"], batch_first=True,
                                       norm_first=s["norm_first"]) for _ in range(s["depth"]))
        self.norm = nn.LayerNorm(s["width"], eps=s["final_eps"])
        self.pool = s["pool"]
        self.head = nn.Linear(s["width"], s["classes"])

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        x = x.mean(1) if self.pool == "mean" else x[:, 0]
        return self.head(x)


def build_optimizer(config, model):
    o = config["optimizer"]
    if o["type"] != "AdamW":
        sys.exit(f"vit.py: the ViT recipe uses AdamW, the config has {o['type']}")
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": o.get("weight_decay", 0.01)},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=o["lr"], betas=tuple(o.get("betas", (0.9, 0.999))), eps=o.get("eps", 1e-8))


def lr_factor(config, step, steps_per_epoch, total_steps):
    """minidl's "warmup" schedule (optim/schedule.cpp): linear warm-up, then cosine to 0."""
    s = config["schedule"]
    if s["type"] != "warmup":
        sys.exit(f"vit.py: expected the \"warmup\" schedule, got {s['type']}")
    e = step / steps_per_epoch
    warm = s["warmup_epochs"]
    if e < warm:
        return e / warm
    warm_steps = warm * steps_per_epoch
    t = (step - warm_steps) / (total_steps - warm_steps) if total_steps > warm_steps else 1.0
    t = min(max(t, 0.0), 1.0)
    return 0.5 * (1 + math.cos(math.pi * t)) if s.get("decay", "linear") == "cosine" else 1 - t


def resolved_precision(config, device):
    """The config's "precision" as minidl trains it: "auto" (the default) is bf16 on a GPU of
    compute capability 8.0 or later, else fp32 (train/precision.h)."""
    precision = config.get("precision", "auto")
    if precision == "auto":
        gpu_bf16 = device == "cuda" and torch.cuda.get_device_capability()[0] >= 8
        precision = "bf16" if gpu_bf16 else "fp32"
    return precision


class Recipe:
    def __init__(self, config, device):
        self.smoothing = config.get("loss", {}).get("label_smoothing", 0.0)
        self.clip = config.get("grad_clip", 0.0)
        self.precision = resolved_precision(config, device)
        self.dtype = {"fp32": None, "bf16": torch.bfloat16}[self.precision]
        self.device = device

    def step(self, model, params, opt, x, y):
        with torch.autocast(self.device, dtype=self.dtype or torch.float32, enabled=self.dtype is not None):
            out = model(x)
        loss = F.cross_entropy(out.float(), y, label_smoothing=self.smoothing)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.clip:
            torch.nn.utils.clip_grad_norm_(params, self.clip)
        opt.step()
        return loss, out


def evaluate(model, recipe, x, y, batch=1000):
    model.eval()
    correct = 0
    with torch.no_grad(), torch.autocast(recipe.device, dtype=recipe.dtype or torch.float32,
                                         enabled=recipe.dtype is not None):
        for lo in range(0, x.shape[0], batch):
            correct += int((model(x[lo:lo + batch]).argmax(1) == y[lo:lo + batch]).sum())
    model.train()
    return 100.0 * correct / x.shape[0]


def time_steps(args, config, model, recipe, label):
    params = list(model.parameters())
    opt = build_optimizer(config, model)
    timed = torch.compile(model) if label == "compile" else model
    batches = r9.fixed_batches(args, config, args.device, 16)
    for g in opt.param_groups:
        g["lr"] = config["optimizer"]["lr"] * 0.5  # any nonzero lr; the time does not depend on it
    warmup = args.warmup * (3 if label == "compile" else 1)  # compiling takes the first steps
    for i in range(warmup):
        recipe.step(timed, params, opt, *batches[i % len(batches)])
    r9.sync(args.device)
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    t0 = time.perf_counter()
    for i in range(args.time_steps):
        recipe.step(timed, params, opt, *batches[i % len(batches)])
    if cuda:
        end.record()
    r9.sync(args.device)
    ms = (start.elapsed_time(end) if cuda else 1000.0 * (time.perf_counter() - t0)) / args.time_steps
    bs = config["batch_size"]
    res = {"mode": label, "steps": args.time_steps, "warmup": warmup, "batch_size": bs, "ms_per_step": ms,
           "images_per_s": bs * 1000.0 / ms,
           "max_memory_allocated_bytes": torch.cuda.max_memory_allocated() if cuda else None}
    peak = f", peak {res['max_memory_allocated_bytes'] / 1e9:.2f} GB" if cuda else ""
    print(f"time ({label}): {ms:.3f} ms/step, {res['images_per_s']:.0f} images/s{peak} (batch {bs}, "
          f"{args.time_steps} steps after {warmup} warm-up)", flush=True)
    return res


def train_epochs(args, config, model, recipe, epochs):
    if not args.data:
        sys.exit("vit.py: --epochs needs --data (the decoded CIFAR-10 folder)")
    device = args.device
    tx, ty, vx, vy = r9.load_cifar10(args.data, device, *r9.norm_of(config))
    limit = config.get("data", {}).get("train_limit", 0)
    if limit:
        tx, ty = tx[:limit], ty[:limit]
    bs = config["batch_size"]
    spe = tx.shape[0] // bs
    total = math.ceil(spe * epochs)
    aug = config.get("data", {}).get("augment", {})
    gen = torch.Generator(device=device)
    gen.manual_seed(args.seed)
    params = list(model.parameters())
    opt = build_optimizer(config, model)
    base_lr = config["optimizer"]["lr"]
    history = []
    r9.sync(device)
    t0 = time.perf_counter()
    step = 0
    for epoch in range(epochs):
        te = time.perf_counter()
        ax = r9.augment(tx, aug, gen)
        perm = torch.randperm(tx.shape[0], device=device, generator=gen)
        loss_sum = torch.zeros((), device=device)
        for i in range(spe):
            idx = perm[i * bs:(i + 1) * bs]
            for g in opt.param_groups:
                g["lr"] = base_lr * lr_factor(config, step, spe, total)
            loss, _ = recipe.step(model, params, opt, ax[idx], ty[idx])
            loss_sum += loss.detach()
            step += 1
        r9.sync(device)
        h = {"epoch": epoch + 1, "train_loss": float(loss_sum) / spe, "epoch_s": time.perf_counter() - te}
        history.append(h)
        print(f"epoch {h['epoch']:3d}  loss {h['train_loss']:.4f}  {h['epoch_s']:.2f}s", flush=True)
    wall = time.perf_counter() - t0
    acc = evaluate(model, recipe, vx, vy)
    print(f"test accuracy {acc:.2f}%; training {wall:.1f} s ({epochs} epochs of {spe} steps)", flush=True)
    return {"epochs": epochs, "steps_per_epoch": spe, "test_acc": acc, "train_wall_s": wall, "history": history,
            "note": "wall time from the first epoch's augmentation to the last step, data already on the GPU"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                     "..", "..", "configs", "vit_cifar10.json"))
    ap.add_argument("--data", default="", help="decoded CIFAR-10 folder (data_batch_*.bin, test_batch.bin)")
    ap.add_argument("--out", required=True, help="JSON file for the results")
    ap.add_argument("--time-steps", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--compile", action="store_true", help="also time torch.compile(model)")
    ap.add_argument("--epochs", type=int, default=None, help="train this many epochs (0: the config's)")
    ap.add_argument("--seed", type=int, default=None, help="default: the config's seed")
    ap.add_argument("--device", default="cuda", help="cuda (the reference), or cpu for a smoke test")
    ap.add_argument("--batch-size", type=int, default=None, help="default: the config's batch_size")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("vit.py: no CUDA GPU here (--device cpu runs a smoke test)")
    with open(args.config) as f:
        config = json.load(f)
    args.seed = config.get("seed", 0) if args.seed is None else args.seed
    if args.batch_size:
        config["batch_size"] = args.batch_size
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = bool(config.get("allow_tf32", True))
    spec = vit_spec(config)
    recipe = Recipe(config, args.device)

    def fresh():
        torch.manual_seed(args.seed)
        return ViT(spec).to(args.device)

    model = fresh()
    result = {"config": os.path.abspath(args.config), "torch": torch.__version__,
              "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "model": spec,
              "parameters": sum(p.numel() for p in model.parameters()),
              "settings": {"autocast": recipe.precision, "grad_clip": recipe.clip,
                           "label_smoothing": recipe.smoothing, "seed": args.seed}}
    print(f"# PyTorch {torch.__version__} on {result['device']}; {args.config}: {result['parameters']} parameters; "
          f"{spec}", flush=True)
    if args.time_steps:
        result["time"] = time_steps(args, config, model, recipe, "eager")
        if args.compile:
            result["time_compile"] = time_steps(args, config, fresh(), recipe, "compile")
    if args.epochs is not None:
        result["train"] = train_epochs(args, config, fresh(), recipe, args.epochs or int(config["epochs"]))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"# wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
