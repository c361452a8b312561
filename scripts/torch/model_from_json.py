"""PyTorch twins of minidl's layers, optimizers and schedules, built from the same JSON config.

Walking the config's layer list gives a model whose state_dict names are minidl's ("0.weight",
"3.1.running_mean"), so weights move between the two frameworks by name (safetensors). A layer
with a fused activation ("relu": true, "gelu": true, ...) stays ONE module (minidl fuses the activation into the
normalization), so indices line up. Keys are read as strictly as minidl's LayerArgs does: an
unknown key, or two activations on one layer, is an error here too, instead of a silently
different network.

Used by scripts/parity/parity.py (layer and one-step checks) and scripts/torch/resnet9.py (the
PyTorch reference training run).
"""
import json
import math
import os
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

# The layer schema minidl prints with `minidl layers --json` (a test keeps this copy equal to it):
# every layer type, its keys with their types and defaults. Nothing here lists layer types.
SCHEMA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "layers.json")
_schema = None


def schema():
    """{type name: {"family", "keys": [{"name", "type", "required", "default"?}], "example", ...}}."""
    global _schema
    if _schema is None:
        with open(SCHEMA_PATH) as f:
            _schema = json.load(f)
    return _schema


# A normalization layer's fused activations: its bool keys and what each applies.
_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu, "hardswish": F.hardswish, "sigmoid": torch.sigmoid}


def _fused_activation(flags):
    """The one activation a normalization layer applies (or None), from its bool keys, as minidl's
    LayerArgs reads them: two of them true is an error."""
    on = [k for k in _ACTIVATIONS if flags.get(k)]
    if len(on) > 1:
        raise ValueError(f'a layer applies one activation, but both "{on[0]}" and "{on[1]}" are true')
    return _ACTIVATIONS[on[0]] if on else None


class _Activated:
    """Mixin of the normalization twins: the fused activation after the normalization."""

    def forward(self, x):
        y = super().forward(x)
        return self.activation(y) if self.activation else y


class _BatchNorm(_Activated):
    """minidl's BatchNorm2d and BatchNorm3d: "weight" and "bias" each default to "affine"; an
    activation fused after. "sync" (statistics over the ranks of a data-parallel run) is the layer
    itself in the one process the twin runs in, as in minidl."""

    def __init__(self, num_features, eps, momentum, affine, sync=False, weight=None, bias=None, **activation):
        weight = affine if weight is None else weight
        bias = affine if bias is None else bias
        super().__init__(num_features, eps=eps, momentum=momentum, affine=weight or bias)
        if not weight and bias:
            self.register_parameter("weight", None)
        if weight and not bias:
            self.register_parameter("bias", None)
        self.activation = _fused_activation(activation)


class BatchNorm2d(_BatchNorm, nn.BatchNorm2d):
    pass


class BatchNorm3d(_BatchNorm, nn.BatchNorm3d):
    pass


class GroupNorm(_Activated, nn.GroupNorm):
    def __init__(self, num_groups, num_channels, eps, affine, **activation):
        super().__init__(num_groups, num_channels, eps=eps, affine=affine)
        self.activation = _fused_activation(activation)


class LayerNorm(_Activated, nn.LayerNorm):
    def __init__(self, normalized_shape, eps, elementwise_affine, **activation):
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine)
        self.activation = _fused_activation(activation)


class LayerNorm2d(nn.LayerNorm):
    """timm's LayerNorm2d (ConvNeXt's channels-first LayerNorm): over C at each pixel."""

    def __init__(self, num_channels, eps, affine, **activation):
        super().__init__(num_channels, eps=eps, elementwise_affine=affine)
        self.activation = _fused_activation(activation)

    def forward(self, x):
        y = F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias, self.eps)
        y = y.permute(0, 3, 1, 2)
        return self.activation(y) if self.activation else y


class LayerScale2d(nn.Module):
    """timm's LayerScale2d: x * gamma per channel, gamma initialized to init_values."""

    def __init__(self, dim, init_values):
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), float(init_values)))

    def forward(self, x):
        return x * self.gamma.view(1, -1, 1, 1)


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
        self.value = float(value)

    def forward(self, x):
        return x * self.value

    def extra_repr(self):
        return f"value={self.value}"


class Tokens(nn.Module):
    """(N, C, H, W) -> (N, H*W, C)."""

    def forward(self, x):
        return x.flatten(2).transpose(1, 2)


class PositionEmbedding(nn.Module):
    def __init__(self, num_tokens, embed_dim, init_std):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(1, num_tokens, embed_dim))
        nn.init.trunc_normal_(self.weight, std=init_std, a=-2.0, b=2.0)

    def forward(self, x):
        return x + self.weight[:, : x.shape[1]]


class Embedding(nn.Embedding):
    """nn.Embedding with minidl's init_std (normal_(0, init_std); PyTorch's default is 1)."""

    def __init__(self, num_embeddings, embedding_dim, init_std):
        super().__init__(num_embeddings, embedding_dim)
        nn.init.normal_(self.weight, std=init_std)

    def forward(self, x):
        return super().forward(x.long())


class LMHead(nn.Module):
    """F.linear(x, wte.weight): tied to the Embedding at index tied_to of its list, which
    Sequential passes in after building every layer (nanoGPT's lm_head.weight = wte.weight)."""

    def __init__(self, tied_to):
        super().__init__()
        self.tied_to = tied_to
        self._embedding = None  # a plain attribute: the weight is registered once, by the Embedding

    def bind_siblings(self, layers):
        if not isinstance(layers[self.tied_to], nn.Embedding):
            raise ValueError(f"LMHead: tied_to {self.tied_to} names a {type(layers[self.tied_to]).__name__}")
        object.__setattr__(self, "_embedding", layers[self.tied_to])

    def forward(self, x):
        return F.linear(x, self._embedding.weight)


class ClassToken(nn.Module):
    def __init__(self, embed_dim):
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))

    def forward(self, x):
        return torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)


class TokenPool(nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.mode = mode

    def forward(self, x):
        return x.mean(1) if self.mode == "mean" else x[:, 0]


def drop_path(x, p, training):
    """timm's drop_path: whole samples zeroed with probability p, the rest scaled by 1/(1-p)."""
    if p == 0.0 or not training:
        return x
    keep = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(1 - p)
    return x * keep / (1 - p)


class DropPath(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        return drop_path(x, self.p, self.training)


class MultiheadAttention(nn.MultiheadAttention):
    """minidl's MultiheadAttention(x): self-attention, batch first, no weights returned."""

    def __init__(self, embed_dim, num_heads, dropout, bias, causal=False):
        super().__init__(embed_dim, num_heads, dropout=dropout, bias=bias, batch_first=True)
        self.causal = causal

    def forward(self, x):
        if not self.causal:
            return super().forward(x, x, x, need_weights=False)[0]
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device, dtype=x.dtype)
        return super().forward(x, x, x, need_weights=False, attn_mask=mask, is_causal=True)[0]


class TransformerEncoderLayer(nn.TransformerEncoderLayer):
    """nn.TransformerEncoderLayer(batch_first=True) plus timm's stochastic depth (drop_path) on
    both residual branches, as minidl's."""

    def __init__(self, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, norm_first, drop_path,
                 bias, causal=False):
        act = (lambda t: F.gelu(t, approximate="tanh")) if activation == "gelu_tanh" else activation
        super().__init__(d_model, nhead, dim_feedforward, dropout, act, layer_norm_eps, batch_first=True,
                         norm_first=norm_first, bias=bias)
        self.drop_path = drop_path
        self.causal = causal

    def forward(self, x):
        dp = lambda t: drop_path(t, self.drop_path, self.training)  # noqa: E731
        mask = None
        if self.causal:
            mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device, dtype=x.dtype)
        if self.norm_first:
            x = x + dp(self._sa_block(self.norm1(x), mask, None, is_causal=self.causal))
            return x + dp(self._ff_block(self.norm2(x)))
        x = self.norm1(x + dp(self._sa_block(x, mask, None, is_causal=self.causal)))
        return self.norm2(x + dp(self._ff_block(x)))


class SqueezeExcitation(nn.Module):
    """torchvision.ops.SqueezeExcitation with its defaults (ReLU, sigmoid): parameters fc1.*, fc2.*."""

    def __init__(self, input_channels, squeeze_channels):
        super().__init__()
        self.fc1 = nn.Conv2d(input_channels, squeeze_channels, 1)
        self.fc2 = nn.Conv2d(squeeze_channels, input_channels, 1)

    def forward(self, x):
        return x * torch.sigmoid(self.fc2(F.relu(self.fc1(F.adaptive_avg_pool2d(x, 1)))))


class Sequential(nn.Sequential):
    """minidl's Sequential: its "layers" are children "0", "1", ..."""

    def __init__(self, layers):
        super().__init__(*layers)
        for layer in layers:
            if hasattr(layer, "bind_siblings"):
                layer.bind_siblings(layers)


class Residual(nn.Module):
    """y = shortcut(x) + body(x); the body's layers are direct children "0", "1", ... as in minidl,
    the shortcut's (a projection; the identity when absent) children of "shortcut"."""

    def __init__(self, body, shortcut=None):
        super().__init__()
        self.body = list(body)
        for i, layer in enumerate(self.body):
            self.add_module(str(i), layer)
        self.shortcut = Sequential(shortcut) if shortcut else None

    def run_body(self, x):
        for layer in self.body:
            x = layer(x)
        return x

    def forward(self, x):
        return (self.shortcut(x) if self.shortcut is not None else x) + self.run_body(x)


class SkipConnection(Residual):
    """y = cat([x, body(x)], dim=1), MONAI's SkipConnection(mode="cat")."""

    def forward(self, x):
        y = self.run_body(x)
        return torch.cat([x.to(y.dtype), y], dim=1)


def twin_class(type_name):
    """The PyTorch module for a minidl layer type: the class of that name above where minidl's
    keys or behaviour differ from PyTorch's, else torch.nn's class of that name."""
    cls = globals().get(type_name)
    if isinstance(cls, type) and issubclass(cls, nn.Module):
        return cls
    cls = getattr(nn, type_name, None)
    if cls is None:
        raise ValueError(f"layer type '{type_name}' has no PyTorch twin: define a class {type_name} in {__file__}")
    return cls


def _value(key, value, path):
    """A key's value as the twin takes it: lists of ints as tuples, layer lists as modules."""
    if key["type"] == "layers":
        return _build_list(value, f"{path}.{key['name']}")
    if key["type"] == "ints" and isinstance(value, list):
        return tuple(value)
    return value


def build_layer(spec, path="spec"):
    """One module from a minidl layer spec, its keys read as strictly as minidl's factories
    (unknown or missing keys are errors); its type name is kept as .minidl_type."""
    if not isinstance(spec, dict) or not isinstance(spec.get("type"), str):
        raise ValueError(f"{path}: a layer must be an object with a string 'type', got {spec!r}")
    layer = schema().get(spec["type"])
    if layer is None:
        raise ValueError(f"{path}.type: unknown layer '{spec['type']}' (known: {', '.join(sorted(schema()))})")
    keys = {k["name"]: k for k in layer["keys"]}
    for name in spec:
        if name != "type" and name not in keys:
            raise ValueError(f"{path}.{name}: unknown key for a {spec['type']} layer")
    kwargs = {}
    for name, key in keys.items():
        if name in spec:
            kwargs[name] = _value(key, spec[name], path)
        elif key["required"]:
            raise ValueError(f"{path}.{name}: required key is missing")
        elif "default" in key:
            kwargs[name] = _value(key, key["default"], path)
        # else: a default computed from other keys, which the twin computes the same way
    m = twin_class(spec["type"])(**kwargs)
    m.minidl_type = spec["type"]
    return m


def _build_list(specs, path):
    if not isinstance(specs, list):
        raise ValueError(f"{path}: expected a list of layers")
    return [build_layer(s, f"{path}[{i}]") for i, s in enumerate(specs)]


def build_sequential(specs, path="model.layers"):
    m = Sequential(_build_list(specs, path))
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
    if kind == "warmup":
        # optim/schedule.cpp: a linear rise over warmup_epochs (or warmup_fraction of the run),
        # then a cosine or linear fall to 0 over the rest of the run.
        if "warmup_fraction" in s:
            warm = s["warmup_fraction"] * total_steps
            if step < warm:
                return step / warm
        else:
            warm = s["warmup_epochs"] * steps_per_epoch
            if step / steps_per_epoch < s["warmup_epochs"]:
                return step / steps_per_epoch / s["warmup_epochs"]
        t = min(max((step - warm) / (total_steps - warm), 0.0), 1.0) if total_steps > warm else 1.0
        return 0.5 * (1 + math.cos(math.pi * t)) if s.get("decay", "linear") == "cosine" else 1 - t
    raise ValueError(f"schedule.type: '{kind}' has no PyTorch twin here (constant, piecewise_linear, warmup)")
