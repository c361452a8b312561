"""PyTorch twins of minidl's layers, optimizers and schedules, built from the same JSON config.

Walking the config's layer list gives a model whose state_dict names are minidl's ("0.weight",
"3.1.running_mean"), so weights move between the two frameworks by name (safetensors). A layer
with "relu": true stays ONE module (minidl fuses the ReLU into the normalization), so indices
line up. Keys are read as strictly as minidl's LayerArgs does: an unknown key is an error here
too, instead of a silently different network.

Used by scripts/parity/parity.py (layer and one-step checks) and scripts/torch/resnet9.py (the
PyTorch reference training run).
"""
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

_REQUIRED = object()


class Keys:
    """Hands out a layer spec's keys like minidl's LayerArgs; finish() rejects unread keys."""

    def __init__(self, spec, path):
        if not isinstance(spec, dict) or not isinstance(spec.get("type"), str):
            raise ValueError(f"{path}: a layer must be an object with a string 'type', got {spec!r}")
        self.spec, self.path, self.used = spec, path, {"type"}

    def get(self, key, default=_REQUIRED):
        self.used.add(key)
        if key in self.spec:
            return self.spec[key]
        if default is _REQUIRED:
            raise ValueError(f"{self.path}.{key}: required key is missing")
        return default

    def pair(self, key, default=_REQUIRED):
        v = self.get(key, default)
        return tuple(v) if isinstance(v, list) else v

    def finish(self):
        for key in self.spec:
            if key not in self.used:
                raise ValueError(f"{self.path}.{key}: unknown key for a {self.spec['type']} layer")


class BatchNorm2d(nn.BatchNorm2d):
    def __init__(self, num_features, eps, momentum, affine, relu):
        super().__init__(num_features, eps=eps, momentum=momentum, affine=affine)
        self.relu = relu

    def forward(self, x):
        y = super().forward(x)
        return F.relu(y) if self.relu else y


class GroupNorm(nn.GroupNorm):
    def __init__(self, num_groups, num_channels, eps, affine, relu):
        super().__init__(num_groups, num_channels, eps=eps, affine=affine)
        self.relu = relu

    def forward(self, x):
        y = super().forward(x)
        return F.relu(y) if self.relu else y


class LayerNorm(nn.LayerNorm):
    def __init__(self, normalized_shape, eps, elementwise_affine, relu):
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine)
        self.relu = relu

    def forward(self, x):
        y = super().forward(x)
        return F.relu(y) if self.relu else y


class GlobalAvgPool2d(nn.Module):
    """(N,C,H,W) -> (N,C), as minidl's (pool and flatten in one)."""

    def forward(self, x):
        return x.mean(dim=(2, 3))


class GlobalMaxPool2d(nn.Module):
    """(N,C,H,W) -> (N,C). Written as a max pool, not amax: amax splits the gradient among tied
    maxima, a max pool (like minidl) sends it all to one element."""

    def forward(self, x):
        return F.adaptive_max_pool2d(x, 1).flatten(1)


class Scale(nn.Module):
    def __init__(self, value):
        super().__init__()
        self.value = value

    def forward(self, x):
        return x * self.value

    def extra_repr(self):
        return f"value={self.value}"


class Residual(nn.Module):
    """y = x + body(x); the body's layers are direct children "0", "1", ... as in minidl."""

    def __init__(self, body):
        super().__init__()
        for i, layer in enumerate(body):
            self.add_module(str(i), layer)

    def forward(self, x):
        y = x
        for layer in self.children():
            y = layer(y)
        return x + y


def _conv2d(k):
    return nn.Conv2d(k.get("in_channels"), k.get("out_channels"), k.pair("kernel_size"),
                     stride=k.pair("stride", 1), padding=k.pair("padding", 0), bias=k.get("bias", True))


def _maxpool2d(k):
    kernel = k.pair("kernel_size")
    return nn.MaxPool2d(kernel, stride=k.pair("stride", kernel), padding=k.pair("padding", 0))


def _layernorm(k):
    shape = k.get("normalized_shape")
    return LayerNorm(shape if isinstance(shape, list) else [shape], k.get("eps", 1e-5),
                     k.get("elementwise_affine", True), k.get("relu", False))


_BUILDERS = {
    "Conv2d": _conv2d,
    "Linear": lambda k: nn.Linear(k.get("in_features"), k.get("out_features"), bias=k.get("bias", True)),
    "BatchNorm2d": lambda k: BatchNorm2d(k.get("num_features"), k.get("eps", 1e-5), k.get("momentum", 0.1),
                                         k.get("affine", True), k.get("relu", False)),
    "GroupNorm": lambda k: GroupNorm(k.get("num_groups"), k.get("num_channels"), k.get("eps", 1e-5),
                                     k.get("affine", True), k.get("relu", False)),
    "LayerNorm": _layernorm,
    "ReLU": lambda k: nn.ReLU(),
    "GELU": lambda k: nn.GELU(approximate=k.get("approximate", "none")),
    "MaxPool2d": _maxpool2d,
    "GlobalAvgPool2d": lambda k: GlobalAvgPool2d(),
    "GlobalMaxPool2d": lambda k: GlobalMaxPool2d(),
    "Flatten": lambda k: nn.Flatten(k.get("start_dim", 1), k.get("end_dim", -1)),
    "Scale": lambda k: Scale(float(k.get("value"))),
    "Sequential": lambda k: build_sequential(k.get("layers"), k.path + ".layers"),
    "Residual": lambda k: Residual(_build_list(k.get("body"), k.path + ".body")),
}


def build_layer(spec, path="spec"):
    """One module from a minidl layer spec; its type name is kept as .minidl_type."""
    k = Keys(spec, path)
    builder = _BUILDERS.get(spec["type"])
    if builder is None:
        raise ValueError(f"{path}.type: unknown layer '{spec['type']}' (known: {', '.join(sorted(_BUILDERS))})")
    m = builder(k)
    k.finish()
    m.minidl_type = spec["type"]
    return m


def _build_list(specs, path):
    if not isinstance(specs, list):
        raise ValueError(f"{path}: expected a list of layers")
    return [build_layer(s, f"{path}[{i}]") for i, s in enumerate(specs)]


def build_sequential(specs, path="model.layers"):
    m = nn.Sequential(*_build_list(specs, path))
    m.minidl_type = "Sequential"
    return m


def build_model(config):
    """The config's model (config["model"]["layers"]), in float32 on the CPU."""
    return build_sequential(config["model"]["layers"], "model.layers")


def minidl_state_dict(model):
    """state_dict under minidl's names: BatchNorm's num_batches_tracked is not a minidl buffer."""
    return {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}


def _name_matches(pattern, name):
    """optim/param_groups.h: without wildcards a dotted suffix; with * or ? the whole name."""
    if "*" not in pattern and "?" not in pattern:
        return name == pattern or name.endswith("." + pattern)
    rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(rx, name) is not None


def param_groups(model, groups, default_wd):
    """torch param groups for minidl's "groups" rules: a parameter takes the first group that
    matches (by "match" on its name and "module_type" of its owner), else the default. Each torch
    group carries its "lr_scale"; set_lr() multiplies it in."""
    owner_type = {name: getattr(m, "minidl_type", type(m).__name__) for name, m in model.named_modules()}
    rules = []
    for i, g in enumerate(groups):
        unknown = set(g) - {"match", "module_type", "lr_scale", "weight_decay"}
        if unknown:
            raise ValueError(f"optimizer.groups[{i}]: unknown keys {sorted(unknown)}")
        rules.append(g)
    buckets = [[] for _ in range(len(rules) + 1)]
    for name, p in model.named_parameters():
        owner = owner_type[name.rpartition(".")[0]]
        for i, g in enumerate(rules):
            if ("match" not in g or _name_matches(g["match"], name)) and \
               ("module_type" not in g or g["module_type"] == owner):
                buckets[i].append(p)
                break
        else:
            buckets[-1].append(p)
    out = []
    for i, g in enumerate(rules):
        if not buckets[i]:
            raise ValueError(f"optimizer.groups[{i}] matches no parameter")
        out.append({"params": buckets[i], "lr_scale": float(g.get("lr_scale", 1.0)),
                    "weight_decay": float(g.get("weight_decay", default_wd))})
    if buckets[-1]:
        out.append({"params": buckets[-1], "lr_scale": 1.0, "weight_decay": default_wd})
    return out


def build_optimizer(config, model):
    """torch.optim.SGD / AdamW from config["optimizer"]; returns (optimizer, base_lr)."""
    c = dict(config["optimizer"])
    kind = c.pop("type")
    groups = c.pop("groups", [])
    lr = float(c.pop("lr", 1e-3))
    if kind == "SGD":
        wd = float(c.pop("weight_decay", 0.0))
        momentum, nesterov = float(c.pop("momentum", 0.0)), bool(c.pop("nesterov", False))
        make = lambda pg: torch.optim.SGD(pg, lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=wd)
    elif kind == "AdamW":
        wd = float(c.pop("weight_decay", 1e-2))
        betas, eps = tuple(c.pop("betas", (0.9, 0.999))), float(c.pop("eps", 1e-8))
        make = lambda pg: torch.optim.AdamW(pg, lr=lr, betas=betas, eps=eps, weight_decay=wd)
    else:
        raise ValueError(f"optimizer.type: '{kind}' has no PyTorch twin here (SGD, AdamW)")
    if c:
        raise ValueError(f"optimizer: unknown keys {sorted(c)}")
    opt = make(param_groups(model, groups, wd))
    set_lr(opt, lr)
    return opt, lr


def set_lr(optimizer, lr):
    for g in optimizer.param_groups:
        g["lr"] = lr * g["lr_scale"]


def schedule_factor(config, step, steps_per_epoch, total_steps=None):
    """The lr factor at global step `step` (0-based): "constant", or "piecewise_linear" with
    "epochs" and "factors" interpolated at the fractional epoch step / steps_per_epoch (or with
    "fractions" of the run, at step / total_steps)."""
    s = config.get("schedule", {"type": "constant"})
    kind = s.get("type")
    if kind == "constant":
        return 1.0
    if kind == "piecewise_linear":
        if "fractions" in s:
            xs, t = s["fractions"], step / total_steps
        else:
            xs, t = s["epochs"], step / steps_per_epoch
        ys = s["factors"]
        if t <= xs[0]:
            return float(ys[0])
        for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
            if t <= x1:
                return float(y0 + (y1 - y0) * (t - x0) / (x1 - x0))
        return float(ys[-1])
    raise ValueError(f"schedule.type: '{kind}' has no PyTorch twin here (constant, piecewise_linear)")
