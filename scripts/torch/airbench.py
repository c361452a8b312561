"""The airbench94 recipe in PyTorch, read from minidl's JSON config (configs/airbench94.json), for
a same-run time and accuracy beside `minidl bench accuracy` (scripts/gpu/airbench.sh).

Our own implementation of what minidl does, with PyTorch's own kernels: the model from the config
(model_from_json.py), its "init" rules (patch whitening through torch.linalg.eigh in float64,
dirac, zeros, unit_std), "freeze" rules as requires_grad, SGD with the config's parameter groups,
the piecewise-linear schedule, lookahead averaging, translate-by-2 with reflect padding and
alternating flips, and the config's weighted TTA. fp32 NCHW with TF32 convolutions (the PyTorch
default), cudnn.benchmark on, eager. Each run is timed like minidl's: from the data in GPU memory
to the final TTA accuracy, a warm-up run first.

    python3 scripts/torch/airbench.py --config configs/airbench94.json --data DIR --runs 5 --json out.json
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_from_json as mfj  # noqa: E402
from resnet9 import load_cifar10  # noqa: E402


def owner_types(model):
    return {name: getattr(m, "minidl_type", type(m).__name__) for name, m in model.named_modules()}


def matching(model, rule):
    owners = owner_types(model)
    out = [(n, p) for n, p in model.named_parameters()
           if ("match" not in rule or mfj._name_matches(rule["match"], n)) and
           ("module_type" not in rule or owners[n.rpartition(".")[0]] == rule["module_type"])]
    if not out:
        raise ValueError(f"rule {rule} matches no parameter")
    return out


@torch.no_grad()
def apply_init(model, rules, train_x):
    for rule in rules:
        for name, p in matching(model, rule):
            kind = rule["type"]
            if kind == "zeros":
                p.zero_()
            elif kind == "ones":
                p.fill_(1)
            elif kind == "dirac":
                torch.nn.init.dirac_(p[:p.shape[1]])
            elif kind == "unit_std":
                p.mul_(1 / p.std())
            elif kind == "patch_whitening":
                c, kh, kw = p.shape[1:]
                x = train_x[:rule.get("images", 5000)]
                patches = x.unfold(2, kh, 1).unfold(3, kw, 1).permute(0, 2, 3, 1, 4, 5).reshape(-1, c * kh * kw).double()
                cov = patches.T @ patches / len(patches)
                evals, evecs = torch.linalg.eigh(cov)
                evals, evecs = evals.flip(0), evecs.T.flip(0)
                w = (evecs / torch.sqrt(evals + rule.get("eps", 5e-4))[:, None]).float().reshape(-1, c, kh, kw)
                p.copy_(torch.cat((w, -w)))
            else:
                raise ValueError(f"init type {kind}")


def tta_views(mode):
    if mode == "airbench":
        return [(False, 0, 0, .25), (True, 0, 0, .25), (False, 1, 1, .125), (True, 1, -1, .125),
                (False, -1, -1, .125), (True, -1, 1, .125)]
    if mode == "flip":
        return [(False, 0, 0, 1.), (True, 0, 0, 1.)]
    return [(False, 0, 0, 1.)]


def view(x, flip, dy, dx):
    """The mirror (when flip) shifted down by dy and right by dx with reflect padding."""
    if flip:
        x = x.flip(-1)
    if dy == 0 and dx == 0:
        return x
    p = F.pad(x, (1, 1, 1, 1), mode="reflect")
    return p[:, :, 1 - dy:1 - dy + x.shape[2], 1 - dx:1 - dx + x.shape[3]]


def epoch_images(train_x, aug, epoch, flip_mask, gen):
    x = train_x
    if aug.get("flip"):
        m = flip_mask if aug.get("flip_mode") == "alternating" else torch.rand(len(x), device=x.device, generator=gen) < .5
        if aug.get("flip_mode") == "alternating" and epoch % 2 == 1:
            m = ~m
        x = torch.where(m.view(-1, 1, 1, 1), x.flip(-1), x)
    pad = aug.get("crop_padding", 0)
    if pad:
        padded = F.pad(x, (pad,) * 4, mode="reflect" if aug.get("padding_mode", "reflect") == "reflect" else "constant")
        n = len(x)
        sy = torch.randint(0, 2 * pad + 1, (n,), device=x.device, generator=gen)
        sx = torch.randint(0, 2 * pad + 1, (n,), device=x.device, generator=gen)
        base = torch.arange(32, device=x.device)
        rows = (sy[:, None] + base)[:, None, :, None].expand(n, 3, 32, 32 + 2 * pad)
        x = padded.gather(2, rows)
        cols = (sx[:, None] + base)[:, None, None, :].expand(n, 3, 32, 32)
        x = x.gather(3, cols)
    return x


def run_once(config, seed, data, device):
    train_x, train_y, test_x, test_y = data
    torch.manual_seed(seed)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    model = mfj.build_model(config).to(device)
    apply_init(model, config.get("init", []), train_x)
    bs, aug = config["batch_size"], config["data"].get("augment", {})
    spe = len(train_x) // bs
    total = math.ceil(spe * config["epochs"])
    freeze = []
    for rule in config.get("freeze", []):
        for name, p in matching(model, rule):
            freeze.append((p, math.ceil(rule.get("from_epoch", 0) * spe)))
    opt, base_lr = mfj.build_optimizer(config, model)
    smoothing = config.get("loss", {}).get("label_smoothing", 0.0)
    la = config.get("lookahead")
    tensors = [t for t in model.state_dict().values() if t.dtype == torch.float32]
    average = None
    flip_mask = torch.rand(len(train_x), device=device, generator=gen) < .5
    step = 0
    for epoch in range(math.ceil(config["epochs"])):
        x_epoch = epoch_images(train_x, aug, epoch, flip_mask, gen)
        order = torch.randperm(len(train_x), device=device, generator=gen)
        for b in range(spe):
            if step >= total:
                break
            for p, from_step in freeze:
                p.requires_grad_(step < from_step)
                if step >= from_step:
                    p.grad = None
            idx = order[b * bs:(b + 1) * bs]
            loss = F.cross_entropy(model(x_epoch[idx]), train_y[idx], label_smoothing=smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            mfj.set_lr(opt, base_lr * mfj.schedule_factor(config, step, spe, total))
            opt.step()
            step += 1
            if la and (step - 1) // spe >= la.get("start_epochs", 0) and step % la.get("every_n_steps", 1) == 0:
                with torch.no_grad():
                    if average is None:
                        average = [t.clone() for t in tensors]
                    else:
                        k = la.get("every_n_steps", 1)
                        rho = la.get("decay_base", 0.95) ** k * (step / total) ** la.get("decay_pow", 3)
                        for a, t in zip(average, tensors):
                            a.lerp_(t, 1 - rho)
                            t.copy_(a)
        if average is not None:
            with torch.no_grad():
                for a, t in zip(average, tensors):
                    t.copy_(a)
    model.eval()
    views = tta_views(config.get("eval", {}).get("tta", "none"))
    correct = correct_tta = 0
    with torch.no_grad():
        for i in range(0, len(test_x), 2000):
            x, y = test_x[i:i + 2000], test_y[i:i + 2000]
            logits = model(x)
            correct += (logits.argmax(1) == y).sum()
            acc = sum(w * model(view(x, f, dy, dx)) for f, dy, dx, w in views)
            correct_tta += (acc.argmax(1) == y).sum()
    correct, correct_tta = correct.item(), correct_tta.item()
    torch.cuda.synchronize()
    return {"seed": seed, "test_acc": 100 * correct / len(test_x), "tta_acc": 100 * correct_tta / len(test_x),
            "seconds": time.perf_counter() - t0, "steps": step}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--data", required=True, help="decoded CIFAR-10 folder (data_batch_*.bin, test_batch.bin)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    config = json.load(open(args.config))
    if config["optimizer"]["type"] != "SGD":
        sys.exit("airbench.py: only the SGD recipe (configs/airbench94.json) has a PyTorch twin here")
    torch.backends.cudnn.benchmark = True
    device = "cuda"
    mean = config["data"].get("mean", (0.4914, 0.4822, 0.4465))
    std = config["data"].get("std", (0.2470, 0.2435, 0.2616))
    data = load_cifar10(args.data, device, mean, std)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, fp32 NCHW, TF32 convolutions, eager")
    warm = run_once(config, 0, data, device)
    print(f"warm-up  seed 0  test {warm['test_acc']:.2f}%  tta {warm['tta_acc']:.2f}%  {warm['seconds']:.3f} s")
    runs = []
    for seed in range(args.runs):
        r = run_once(config, seed, data, device)
        runs.append(r)
        print(f"run {seed + 1}  seed {seed}  test {r['test_acc']:.2f}%  tta {r['tta_acc']:.2f}%  {r['seconds']:.3f} s",
              flush=True)
    def stats(key):
        v = torch.tensor([r[key] for r in runs], dtype=torch.float64)
        return v.mean().item(), (v.std().item() if len(v) > 1 else 0.0)
    (am, asd), (tm, tsd), (sm, ssd) = stats("test_acc"), stats("tta_acc"), stats("seconds")
    print(f"test {am:.2f}% (std {asd:.2f})  TTA {tm:.2f}% (std {tsd:.2f})  time {sm:.3f} s (std {ssd:.3f})")
    if args.json:
        json.dump({"config": args.config, "device": torch.cuda.get_device_name(), "runs": runs,
                   "warmup_seconds": warm["seconds"], "steps": warm["steps"], "test_acc_mean": am, "test_acc_std": asd,
                   "tta_acc_mean": tm, "tta_acc_std": tsd, "seconds_mean": sm, "seconds_std": ssd}, open(args.json, "w"),
                  indent=2)


if __name__ == "__main__":
    main()
