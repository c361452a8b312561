#!/usr/bin/env python3
"""Parity of minidl with PyTorch, layer by layer and for one whole training step of a config
(ResNet-9 by default; configs/vit_tiny_cpu.json for the ViT, its gradient clipping included).

For each check this script makes random weights and inputs with numpy, writes them to a
safetensors file under PyTorch's names, runs `minidl parity` on it (on the CPU and on CUDA), runs
the same computation in PyTorch (float32, TF32 off on both sides), and compares every tensor:
    rel_err = ||minidl - torch|| / ||torch||   (float64 norms over the whole tensor)
against 1e-4 for single layers and 1e-3 for the ResNet-9 step (docs/parity.md says why).
Prints one line per tensor compared, then a summary; exits 1 if any check fails.

usage: parity.py --minidl build/minidl --out OUTDIR [--config configs/resnet9.json]
                 [--devices cpu,cuda] [--batch 32] [--only SUBSTRING]
                 [--amp bf16|fp16] [--channels-last]

--amp runs PyTorch under torch.autocast (with GradScaler's initial scale for the fp16 step) and
minidl with --precision; --channels-last gives both the 4-d activations in NHWC. The tolerances
then follow docs/parity.md: one unit in the last place of the half type, 2^(1-p), for a single
layer; for the whole step twice PyTorch's own distance between its mixed-precision and its
float32 step, per tensor (never below the float32 tolerances).
Needs torch, numpy and safetensors (the GPU machine has them).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.numpy import load_file, save_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch"))
import model_from_json as mfj  # noqa: E402

LAYER_TOL = 1e-4
MODEL_TOL = 1e-3
# Gradients of the whole step when its forward has near-ties (see count_near_ties): one flipped
# max-pool argmax or ReLU moves ~0.5% of a conv weight gradient, PyTorch against itself included.
FLIP_TOL = 2e-2
NEAR_TIE_MARGIN = 1e-5

# (name, layer spec, input shape, mode, input mean, input std), beyond the layers' own examples
# (example_cases): ragged shapes on purpose (odd N, H, W and channel counts that are not
# multiples of 8 or 32), eval mode, and normalization inputs far from mean 0 and std 1.
LAYER_CASES = [
    ("Conv2d k3 p1 bias", {"type": "Conv2d", "in_channels": 5, "out_channels": 7, "kernel_size": 3,
                           "padding": 1}, (3, 5, 9, 11), "train", 0.0, 1.0),
    ("Conv2d k3 s2 p1 no bias", {"type": "Conv2d", "in_channels": 6, "out_channels": 10, "kernel_size": 3,
                                 "stride": 2, "padding": 1, "bias": False}, (4, 6, 13, 10), "train", 0.0, 1.0),
    ("Conv2d k1 no bias", {"type": "Conv2d", "in_channels": 24, "out_channels": 40, "kernel_size": 1,
                           "bias": False}, (2, 24, 7, 5), "train", 0.0, 1.0),
    ("Conv2d groups 3 dilation 2", {"type": "Conv2d", "in_channels": 6, "out_channels": 9, "kernel_size": 3,
                                    "padding": 2, "dilation": 2, "groups": 3}, (3, 6, 9, 11), "train", 0.0, 1.0),
    ("Conv2d depthwise k3 s2 p1", {"type": "Conv2d", "in_channels": 16, "out_channels": 16, "kernel_size": 3,
                                   "stride": 2, "padding": 1, "groups": 16}, (4, 16, 11, 9), "train", 0.0, 1.0),
    ("Conv2d depthwise k7 p3 no bias", {"type": "Conv2d", "in_channels": 24, "out_channels": 24,
                                        "kernel_size": 7, "padding": 3, "groups": 24, "bias": False},
     (3, 24, 9, 10), "train", 0.0, 1.0),
    ("Linear bias", {"type": "Linear", "in_features": 37, "out_features": 11}, (9, 37), "train", 0.0, 1.0),
    ("Linear no bias", {"type": "Linear", "in_features": 64, "out_features": 10, "bias": False},
     (5, 64), "train", 0.0, 1.0),
    ("BatchNorm2d train", {"type": "BatchNorm2d", "num_features": 19}, (5, 19, 7, 9), "train", 3.0, 2.0),
    ("BatchNorm2d train relu", {"type": "BatchNorm2d", "num_features": 19, "relu": True}, (5, 19, 7, 9),
     "train", 3.0, 2.0),
    ("BatchNorm2d eval relu", {"type": "BatchNorm2d", "num_features": 19, "relu": True}, (5, 19, 7, 9),
     "eval", 3.0, 2.0),
    ("BatchNorm2d train gelu", {"type": "BatchNorm2d", "num_features": 19, "gelu": True}, (5, 19, 7, 9),
     "train", 3.0, 2.0),
    ("GroupNorm 4 groups", {"type": "GroupNorm", "num_groups": 4, "num_channels": 12}, (3, 12, 5, 7),
     "train", 3.0, 2.0),
    ("GroupNorm 1 group", {"type": "GroupNorm", "num_groups": 1, "num_channels": 6}, (3, 6, 5, 7),
     "train", 3.0, 2.0),
    ("LayerNorm [C,H,W]", {"type": "LayerNorm", "normalized_shape": [6, 5, 7]}, (3, 6, 5, 7), "train", 3.0, 2.0),
    ("BatchNorm2d train silu", {"type": "BatchNorm2d", "num_features": 19, "silu": True}, (5, 19, 7, 9),
     "train", 3.0, 2.0),
    ("GroupNorm hardswish", {"type": "GroupNorm", "num_groups": 3, "num_channels": 12, "hardswish": True},
     (3, 12, 5, 7), "train", 3.0, 2.0),
    ("LayerNorm2d", {"type": "LayerNorm2d", "num_channels": 13}, (3, 13, 5, 7), "train", 3.0, 2.0),
    ("LayerNorm2d sigmoid", {"type": "LayerNorm2d", "num_channels": 6, "sigmoid": True}, (3, 6, 5, 7),
     "train", 3.0, 2.0),
    ("ReLU", {"type": "ReLU"}, (4, 7, 5, 3), "train", 0.0, 1.0),
    ("SiLU", {"type": "SiLU"}, (4, 7, 5, 3), "train", 0.0, 3.0),
    ("Hardswish", {"type": "Hardswish"}, (4, 7, 5, 3), "train", 0.0, 3.0),
    ("Sigmoid", {"type": "Sigmoid"}, (4, 7, 5, 3), "train", 0.0, 3.0),
    ("LayerScale2d", {"type": "LayerScale2d", "dim": 7, "init_values": 0.5}, (4, 7, 5, 3), "train", 0.0, 1.0),
    ("SqueezeExcitation", {"type": "SqueezeExcitation", "input_channels": 12, "squeeze_channels": 4}, (3, 12, 5, 7),
     "train", 0.0, 1.0),
    ("GELU", {"type": "GELU"}, (4, 7, 5, 3), "train", 0.0, 2.0),
    ("MaxPool2d k2", {"type": "MaxPool2d", "kernel_size": 2}, (3, 5, 9, 10), "train", 0.0, 1.0),
    ("MaxPool2d k3 s2 p1", {"type": "MaxPool2d", "kernel_size": 3, "stride": 2, "padding": 1}, (3, 5, 9, 11),
     "train", 0.0, 1.0),
    ("AvgPool2d k3 s2 p1", {"type": "AvgPool2d", "kernel_size": 3, "stride": 2, "padding": 1}, (3, 5, 9, 11),
     "train", 0.0, 1.0),
    ("AvgPool2d k3 s2 p1 ceil no pad count", {"type": "AvgPool2d", "kernel_size": 3, "stride": 2, "padding": 1,
                                             "ceil_mode": True, "count_include_pad": False}, (3, 5, 10, 8),
     "train", 0.0, 1.0),
    ("AdaptiveAvgPool2d 3x2", {"type": "AdaptiveAvgPool2d", "output_size": [3, 2]}, (3, 5, 7, 5), "train", 0.0, 1.0),
    ("GlobalAvgPool2d", {"type": "GlobalAvgPool2d"}, (3, 7, 5, 6), "train", 0.0, 1.0),
    ("GlobalMaxPool2d", {"type": "GlobalMaxPool2d"}, (3, 7, 5, 6), "train", 0.0, 1.0),
    ("Scale 0.125", {"type": "Scale", "value": 0.125}, (3, 10), "train", 0.0, 1.0),
    ("Residual projection", {"type": "Residual",
                             "body": [{"type": "Conv2d", "in_channels": 4, "out_channels": 6, "kernel_size": 3,
                                       "stride": 2, "padding": 1, "bias": False},
                                      {"type": "BatchNorm2d", "num_features": 6}],
                             "shortcut": [{"type": "Conv2d", "in_channels": 4, "out_channels": 6, "kernel_size": 1,
                                           "stride": 2, "bias": False},
                                          {"type": "BatchNorm2d", "num_features": 6}]},
     (3, 4, 9, 8), "train", 0.0, 1.0),
    ("Flatten", {"type": "Flatten"}, (3, 4, 5, 6), "train", 0.0, 1.0),
    ("Tokens", {"type": "Tokens"}, (3, 6, 5, 7), "train", 0.0, 1.0),
    ("PositionEmbedding", {"type": "PositionEmbedding", "num_tokens": 7, "embed_dim": 12}, (3, 7, 12), "train",
     0.0, 1.0),
    ("ClassToken", {"type": "ClassToken", "embed_dim": 12}, (3, 7, 12), "train", 0.0, 1.0),
    ("TokenPool mean", {"type": "TokenPool"}, (3, 7, 12), "train", 0.0, 1.0),
    ("TokenPool cls", {"type": "TokenPool", "mode": "cls"}, (3, 7, 12), "train", 0.0, 1.0),
    ("LayerNorm [D] over tokens", {"type": "LayerNorm", "normalized_shape": [12]}, (3, 7, 12), "train", 3.0, 2.0),
    ("MultiheadAttention", {"type": "MultiheadAttention", "embed_dim": 12, "num_heads": 3}, (3, 7, 12), "train",
     0.0, 1.0),
    ("TransformerEncoderLayer pre-norm gelu", {"type": "TransformerEncoderLayer", "d_model": 12, "nhead": 3,
                                               "dim_feedforward": 20, "dropout": 0.0, "activation": "gelu",
                                               "norm_first": True}, (3, 7, 12), "train", 0.0, 1.0),
    ("TransformerEncoderLayer post-norm relu", {"type": "TransformerEncoderLayer", "d_model": 12, "nhead": 3,
                                                "dim_feedforward": 20, "dropout": 0.0}, (3, 7, 12), "train", 0.0, 1.0),
    # Random masks are Philox's in minidl and torch's own generator in PyTorch: compared in eval
    # mode, where both are the identity (docs/transformer.md's tests hold the training masks).
    ("Dropout eval", {"type": "Dropout", "p": 0.3}, (3, 7, 12), "eval", 0.0, 1.0),
    ("DropPath eval", {"type": "DropPath", "p": 0.3}, (3, 7, 12), "eval", 0.0, 1.0),
]



# Keys that make a layer draw random masks in training when positive. minidl's masks are Philox's
# and PyTorch's come from its own generator, so such an example is compared in eval mode, where
# both are the identity (the op harness holds the training masks to the CPU's).
MASK_KEYS = ("p", "dropout", "drop_path")


def draws_masks(spec, layer):
    defaults = {k["name"]: k.get("default") for k in layer["keys"]}
    return any((spec.get(k, defaults[k]) or 0) > 0 for k in MASK_KEYS if k in defaults)


def example_cases():
    """Every example of every layer type in the schema (docs/layers.json): the specs and inputs
    that the op harness (tests/test_op_harness*.cpp) and the ONNX check run too, so every
    registered layer type is compared with its PyTorch twin. An example that needs layers before it
    (an LMHead's Embedding) runs as one Sequential of them; one that takes token ids (ids_below)
    is fed int32 ids in [0, ids_below)."""
    cases = []
    for name, layer in sorted(mfj.schema().items()):
        for i, e in enumerate(layer["examples"]):
            mode = "eval" if draws_masks(e["spec"], layer) else "train"
            spec = e["spec"]
            if e.get("before"):
                spec = {"type": "Sequential", "layers": e["before"] + [spec]}
            cases.append((f"{name} example {i}", spec, tuple(e["input"]), mode, 0.0, 1.0, e.get("ids_below", 0)))
    return cases


def layer_cases():
    return LAYER_CASES + example_cases()


# Layer types whose weight and bias are a normalization's affine parameters: the schema's "norm"
# family (layers/norm/).
NORM_TYPES = {name for name, layer in mfj.schema().items() if layer["family"] == "norm"}
AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# Significant bits of each half type: one ulp is at most 2^(1-p) of a value.
SIGNIFICANT_BITS = {"bf16": 8, "fp16": 11}


def half_ulp_tol(amp):
    """A single layer's tolerance in a half type: both sides round the same inputs once to the half
    type and their float32 sums differ by ~1e-6 relative, so each element rounds to the same value
    or to the neighbouring one: at most one ulp, 2^(1-p) of the element, hence of the norm too."""
    return 2.0 ** (1 - SIGNIFICANT_BITS[amp])


def to_torch_format(t, channels_last):
    return t.contiguous(memory_format=torch.channels_last) if channels_last and t.dim() == 4 else t


def autocast(device, amp):
    """torch.autocast in the half type `amp` names; off for "" (float32)."""
    return torch.autocast(device_type=device, dtype=AMP_DTYPES.get(amp, torch.float32), enabled=bool(amp))


def rel_err(got, want):
    """||got - want|| / ||want|| in float64; the plain norm of the difference when want is 0."""
    g, w = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    if not np.all(np.isfinite(g)):
        return float("inf")
    diff = np.linalg.norm(g - w)
    scale = np.linalg.norm(w)
    return float(diff / scale) if scale > 0 else float(diff)


def random_state(model, rng):
    """numpy values for every parameter and buffer (minidl names): weights U(+-1/sqrt(fan_in)) as
    PyTorch's default init; normalization affine parameters and running statistics away from
    their trivial 1/0 so that they matter."""
    types = {name: getattr(m, "minidl_type", "") for name, m in model.named_modules()}
    state = {}
    for name, t in mfj.minidl_state_dict(model).items():
        owner, _, leaf = name.rpartition(".")
        shape = tuple(t.shape)
        if types.get(owner) in NORM_TYPES:
            if leaf == "weight":
                v = rng.uniform(0.5, 1.5, shape)
            elif leaf == "bias":
                v = rng.uniform(-0.5, 0.5, shape)
            elif leaf == "running_mean":
                v = rng.normal(0.0, 0.5, shape)
            else:  # running_var
                v = rng.uniform(0.5, 2.0, shape)
        else:
            weight = dict(model.named_parameters()).get(name if leaf == "in_proj_weight" else
                                                        owner + ".weight" if owner else "weight")
            fan_in = int(np.prod(weight.shape[1:])) if weight is not None and weight.dim() > 1 else 1
            b = 1.0 / np.sqrt(fan_in)
            v = rng.uniform(-b, b, shape)
        state[name] = np.ascontiguousarray(v, dtype=np.float32)
    return state


def load_into(model, state):
    current = model.state_dict()
    with torch.no_grad():
        for name, v in state.items():
            current[name].copy_(torch.from_numpy(v))


def run_minidl(args, extra, out_path):
    """Runs `minidl parity`; returns (its output tensors, None) or (None, why it failed)."""
    cmd = [args.minidl, "parity", *extra, "--out", out_path]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, f"minidl exited {p.returncode}: {' '.join(cmd)}\n{(p.stdout + p.stderr)[-2000:]}"
    return load_file(out_path), None


class Report:
    def __init__(self):
        self.passed = self.failed = 0

    def line(self, check, device, tensor, err, tol):
        ok = err <= tol
        self.passed += ok
        self.failed += not ok
        print(f"{'PASS' if ok else 'FAIL'}  {check:28s} {device:5s} {tensor:30s} rel_err {err:9.2e}"
              f"  (tol {tol:.0e})", flush=True)

    def fail(self, check, device, what):
        self.failed += 1
        print(f"FAIL  {check:28s} {device:5s} {what}", flush=True)


def compare(report, check, device, want, got, tol):
    for name, w in want.items():
        if name not in got:
            report.fail(check, device, f"{name}: missing from minidl's output (has {sorted(got)})")
            continue
        g = got[name]
        if g.shape != w.shape and not (g.size == 1 and w.size == 1):
            report.fail(check, device, f"{name}: shape {g.shape} but PyTorch gives {w.shape}")
            continue
        report.line(check, device, name, rel_err(g, w), tol)


def torch_layer(spec, state, x, mode, device, rng, amp="", channels_last=False):
    """Runs the layer in PyTorch (under autocast when amp is bf16/fp16); grad_output is drawn from
    rng once the output shape is known. Returns the reference tensors and grad_output."""
    m = mfj.build_layer(spec).float()
    load_into(m, state)
    m.to(device).train(mode == "train")
    if channels_last:
        m.to(memory_format=torch.channels_last)
    xt = torch.from_numpy(x).to(device)
    ids = not torch.is_floating_point(xt)  # token ids take no gradient
    if not ids:
        xt.requires_grad_(True)
    with autocast(device, amp):
        y = m(to_torch_format(xt, channels_last))
    dy = rng.normal(0.0, 1.0, tuple(y.shape)).astype(np.float32)
    y.backward(torch.from_numpy(dy).to(device).to(y.dtype))
    ref = {"output": y} if ids else {"output": y, "grad_input": xt.grad}
    for name, p in m.named_parameters():
        ref["grad." + name] = p.grad
    for name, b in m.named_buffers():
        if not name.endswith("num_batches_tracked"):
            ref["buffer." + name] = b
    return {k: v.detach().float().cpu().contiguous().numpy() for k, v in ref.items()}, dy


def mode_args(args):
    """minidl parity's options for the precision and memory format of this run, always named: a
    config's default ("auto") would train bf16 channels_last on a GPU."""
    return ["--precision", args.amp or "fp32",
            "--memory-format", "channels_last" if args.channels_last else "contiguous"]


def layer_checks(args, report, torch_device):
    for i, case in enumerate(layer_cases()):
        check, spec, shape, mode, mean, std = case[:6]
        ids_below = case[6] if len(case) > 6 else 0
        if args.only not in check:
            continue
        rng = np.random.default_rng(1000 + i)
        tag = f"layer{i:02d}"
        try:
            state = random_state(mfj.build_layer(spec), rng)
        except ValueError as e:  # a layer type without a PyTorch twin, or keys the twin does not take
            report.fail(check, "torch", str(e))
            continue
        if ids_below:
            x = rng.integers(0, ids_below, shape).astype(np.int32)
        else:
            x = rng.normal(mean, std, shape).astype(np.float32)
        want, dy = torch_layer(spec, state, x, mode, torch_device, rng, args.amp, args.channels_last)
        in_path = os.path.join(args.out, f"{tag}_in.safetensors")
        spec_path = os.path.join(args.out, f"{tag}_spec.json")
        save_file({"input": x, "grad_output": dy, **state}, in_path)
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        for device in args.devices:
            got, why = run_minidl(args, ["--spec", spec_path, "--in", in_path, "--device", device,
                                          "--train" if mode == "train" else "--eval", "--no-tf32",
                                          *mode_args(args)],
                                   os.path.join(args.out, f"{tag}_{device}_out.safetensors"))
            if got is None:
                report.fail(check, device, why)
                continue
            compare(report, check, device, want, got, half_ulp_tol(args.amp) if args.amp else LAYER_TOL)


def count_near_ties(config, state, x, margin):
    """Where the step is not smooth: in a float64 forward on the CPU, the max-pool windows whose
    two largest values are within `margin` (times the input's rms) and the ReLU inputs within
    `margin` of 0. There a float32 rounding difference can pick another argmax or flip a ReLU,
    which sends one element's gradient down another path."""
    model = mfj.build_model(config).double().train()
    load_into(model, {k: v.astype(np.float64) for k, v in state.items()})
    count = [0]

    def pool_hook(mod, inputs, out):
        a = inputs[0]
        if isinstance(mod, torch.nn.MaxPool2d):
            cols = F.unfold(F.pad(a, [mod.padding] * 4 if isinstance(mod.padding, int) else
                                  [mod.padding[1], mod.padding[1], mod.padding[0], mod.padding[0]],
                                  value=-float("inf")), mod.kernel_size, stride=mod.stride)
            k = cols.shape[1] // a.shape[1]
            windows = cols.reshape(a.shape[0], a.shape[1], k, -1).transpose(2, 3).reshape(-1, k)
        else:
            windows = a.reshape(a.shape[0] * a.shape[1], -1)
        top2 = windows.topk(2, dim=1).values
        gap = top2[:, 0] - top2[:, 1]
        # An exact tie at 0 is harmless: it comes from a ReLU, which stops the gradient either way.
        near = (gap < margin * a.pow(2).mean().sqrt()) & (top2[:, 0] != 0)
        count[0] += int(near.sum())

    def relu_hook(mod, inputs, out):
        # A normalization twin with a fused ReLU: its input to the ReLU is the normalization's output.
        pre = inputs[0] if isinstance(mod, torch.nn.ReLU) else super(mfj._Activated, mod).forward(inputs[0])
        count[0] += int((pre.abs() < margin * pre.pow(2).mean().sqrt()).sum())

    for mod in model.modules():
        if isinstance(mod, (torch.nn.MaxPool2d, mfj.GlobalMaxPool2d)):
            mod.register_forward_hook(pool_hook)
        elif isinstance(mod, torch.nn.ReLU) or (isinstance(mod, mfj._Activated) and mod.activation is F.relu):
            mod.register_forward_hook(relu_hook)
    with torch.no_grad():
        model(torch.from_numpy(x.astype(np.float64)))
    return count[0]


def torch_step(config, state, x, labels, device, channels_last=False, amp=""):
    """One training step in PyTorch at the optimizer's base lr (the schedule is ignored, as in
    `minidl parity`): float32, or under autocast (fp16 with GradScaler's initial scale, the
    gradients unscaled before they are recorded). Returns the tensors `minidl parity --config`
    writes."""
    model = mfj.build_model(config).float()
    load_into(model, state)
    model.to(device).train()
    if channels_last:
        model.to(memory_format=torch.channels_last)
    xt = to_torch_format(torch.from_numpy(x).to(device), channels_last)
    opt, lr = mfj.build_optimizer(config, model)
    with autocast(device, amp):
        logits = model(xt)
    smoothing = config.get("loss", {}).get("label_smoothing", 0.0)
    loss = F.cross_entropy(logits.float(), torch.from_numpy(labels).long().to(device), label_smoothing=smoothing)
    scaler = torch.amp.GradScaler(device, init_scale=65536.0, enabled=amp == "fp16")
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    if config.get("grad_clip"):
        torch.nn.utils.clip_grad_norm_(model.parameters(), config["grad_clip"])
    out = {"loss": loss, "output": logits}
    for name, p in model.named_parameters():
        out["grad." + name] = p.grad.clone()
    scaler.step(opt)
    params = dict(model.named_parameters())
    for name, p in params.items():
        out["param." + name] = p
    for name, b in mfj.minidl_state_dict(model).items():
        if name not in params:
            out["buffer." + name] = b
    return {k: v.detach().float().cpu().contiguous().numpy() for k, v in out.items()}, lr, smoothing


def torch_update_from(config, state, grads):
    """PyTorch's optimizer step applied to the given gradients (float32, CPU): param after - before."""
    model = mfj.build_model(config).float()
    load_into(model, state)
    opt, _ = mfj.build_optimizer(config, model)
    for name, p in model.named_parameters():
        p.grad = torch.from_numpy(grads["grad." + name].reshape(tuple(p.shape)).copy())
    opt.step()
    return {name: p.detach().double().numpy() - state[name] for name, p in model.named_parameters()}


def step_check_name(args):
    return f"{os.path.basename(args.config)} step"


def model_check(args, report, torch_device):
    with open(args.config) as f:
        config = json.load(f)
    check = step_check_name(args)
    rng = np.random.default_rng(7)
    model = mfj.build_model(config)
    state = random_state(model, rng)
    x = rng.normal(0.0, 1.0, (args.batch, 3, 32, 32)).astype(np.float32)
    classes = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1].out_features
    labels = rng.integers(0, classes, args.batch).astype(np.int32)
    in_path = os.path.join(args.out, "model_in.safetensors")
    save_file({"input": x, "labels": labels, **state}, in_path)

    fp32, lr, smoothing = torch_step(config, state, x, labels, torch_device)
    want_cl, _, _ = torch_step(config, state, x, labels, torch_device, channels_last=True)
    self_noise = max(rel_err(want_cl[k], fp32[k]) for k in fp32 if k.startswith("grad."))
    ties = count_near_ties(config, state, x, NEAR_TIE_MARGIN)
    grad_tol = MODEL_TOL if ties == 0 else FLIP_TOL
    print(f"# {check} ({args.config}): batch {args.batch}, lr {lr}, label_smoothing {smoothing}, "
          f"PyTorch loss {float(fp32['loss']):.6f}", flush=True)
    print(f"# the forward has {ties} near-ties (max-pool windows with two values, or ReLU inputs and 0, "
          f"within {NEAR_TIE_MARGIN:.0e} rms): gradients held to {grad_tol:.0e}; PyTorch float32 "
          f"channels_last vs NCHW on this step: worst gradient rel_err {self_noise:.2e}", flush=True)
    want = fp32
    # A gradient that is zero in exact arithmetic (a norm's bias whose per-channel shift the next
    # norm removes) is rounding noise in both frameworks: it is held to twice PyTorch's own
    # distance between its NCHW and channels_last steps, as the other modes below are.
    tols = {k: max(grad_tol, 2 * rel_err(want_cl[k], fp32[k])) if k.startswith("grad.") else MODEL_TOL
            for k in fp32}
    # A parameter after the step is off by its gradient's error scaled by the update's share of it.
    for k in fp32:
        name = k[len("param."):]
        if k.startswith("param.") and name in state:
            update = np.linalg.norm((fp32[k] - state[name]).astype(np.float64))
            share = update / max(np.linalg.norm(fp32[k].astype(np.float64)), 1e-30)
            tols[k] = max(MODEL_TOL, tols["grad." + name] * share)
    if args.amp or args.channels_last:
        # PyTorch's step in this mode is the reference; minidl in the same mode may be as far from it
        # as twice PyTorch's own distance to its float32 step (if each is no further than that from
        # the float32 step, the triangle inequality bounds their distance by the sum).
        want, _, _ = torch_step(config, state, x, labels, torch_device, args.channels_last, args.amp)
        tols = {k: max(tols[k], 2 * rel_err(want[k], fp32[k])) for k in want}
        worst = max(tols, key=lambda k: tols[k])
        print(f"# {args.amp or 'fp32'} {'channels_last' if args.channels_last else 'contiguous'}: PyTorch in this "
              f"mode against its float32 step, loss {float(want['loss']):.6f}; widest tolerance {tols[worst]:.2e} "
              f"({worst})", flush=True)

    for device in args.devices:
        got, why = run_minidl(args, ["--config", args.config, "--in", in_path, "--device", device, "--no-tf32",
                                     *mode_args(args)],
                               os.path.join(args.out, f"model_{device}_out.safetensors"))
        if got is None:
            report.fail(check, device, why)
            continue
        for name, w in want.items():
            compare(report, check, device, {name: w}, got, tols[name])
        # The optimizer alone: PyTorch's step applied to minidl's own gradients must give minidl's
        # update (param after - param before). Smooth, so it keeps the tight tolerance whatever
        # the gradients did, and it sees what param.* hides behind the much larger weights.
        if all("grad." + n in got and "param." + n in got for n in state if "running_" not in n):
            expected = torch_update_from(config, state, got)
            for name, upd in expected.items():
                report.line(check, device, "update." + name,
                            rel_err(got["param." + name].astype(np.float64) - state[name], upd), MODEL_TOL)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minidl", required=True, help="path of the minidl binary")
    ap.add_argument("--out", required=True, help="folder for the exchanged safetensors files")
    ap.add_argument("--config", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                     "..", "..", "configs", "resnet9.json"))
    ap.add_argument("--devices", default=None, help="minidl devices, default cpu,cuda (cpu without a GPU)")
    ap.add_argument("--batch", type=int, default=32, help="batch of the whole-model step")
    ap.add_argument("--only", default="", help="run only the checks whose name contains this")
    ap.add_argument("--amp", choices=sorted(AMP_DTYPES), default="", help="torch.autocast / minidl --precision")
    ap.add_argument("--channels-last", action="store_true", help="NHWC activations on both sides")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    has_cuda = torch.cuda.is_available()
    args.devices = args.devices.split(",") if args.devices else (["cpu", "cuda"] if has_cuda else ["cpu"])
    torch_device = "cuda" if has_cuda else "cpu"
    # Full float32 on the PyTorch side; minidl gets --no-tf32.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    print(f"# minidl {args.minidl} on {','.join(args.devices)}; PyTorch {torch.__version__} on {torch_device}"
          f"{' (' + torch.cuda.get_device_name() + ')' if has_cuda else ''}; TF32 off; "
          f"{args.amp or 'fp32'}, {'channels_last' if args.channels_last else 'contiguous'}", flush=True)

    report = Report()
    layer_checks(args, report, torch_device)
    if args.only in step_check_name(args):
        model_check(args, report, torch_device)
    print(f"parity: {report.passed} passed, {report.failed} failed")
    sys.exit(1 if report.failed else 0)


if __name__ == "__main__":
    main()
