#!/usr/bin/env python3
"""Charts of minidl runs and profiles, as PNG and SVG (matplotlib, no display needed).

    scripts/plot.py RUN_OR_PROFILE_DIR... [--out DIR] [--labels A,B,...] [--dpi N]

Each folder is a run folder (`minidl train`: metrics.jsonl, steps.jsonl) or a profile folder
(`minidl profile --output`, or a run trained with --profile: profile.json); a run folder with a
profile.json is both. Writes into --out (default: the first folder):

  training.png / .svg   one chart per quantity, every run on each (colour = run):
                        loss against epoch (per-step loss faint, epoch mean solid), accuracy
                        against epoch (train solid, test dashed, test with TTA dotted), the
                        learning rate and images/s against epoch, loss and accuracy against wall
                        time (training plus evaluation seconds, summed over epochs)
  profile.png / .svg    per profile, each module's own time per step as stacked bars: forward and
                        backward, GPU and host side by side (host only for a CPU profile), each
                        bar labelled with the row's % of the device's limit where it reports work;
                        profile_<label>.png for each when there are several profiles
  roofline.png / .svg   per profile with measured limits: each row's forward (circle) and backward
                        (triangle) pass at its arithmetic intensity (FLOP/byte) and achieved
                        TFLOP/s, under the measured roofs (peak GEMM rate, copy bandwidth);
                        roofline_<label>.png for each when there are several profiles
  confusion_<label>.png / .svg  per finished run whose summary.json holds a confusion matrix:
                        the test set's confusion matrix as a heatmap (rows: true class, columns:
                        predicted; each row as a share of its class, counts written in the cells
                        of up to 20 classes) and the per-class accuracy as bars

Labels default to the folder names. Exits 2 with a message naming the folder when one holds
neither metrics.jsonl nor profile.json, or a file is not what minidl writes.
"""
import argparse
import json
import os
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("plot.py: matplotlib is not installed (apt-get install python3-matplotlib)", file=sys.stderr)
    sys.exit(3)


class InputError(Exception):
    pass


def read_jsonl(path):
    with open(path) as f:
        lines = [(n, line) for n, line in enumerate(f, 1) if line.strip()]
    rows = []
    for i, (n, line) in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            if i == len(lines) - 1:
                break  # a torn last line: the run was stopped mid-write
            raise InputError(f"{path}:{n}: not a JSON line ({e})")
    return rows


def need(row, key, path):
    if key not in row:
        raise InputError(f"{path}: a record without '{key}': {row}")
    return row[key]


class Run:
    def __init__(self, folder, label):
        self.label = label
        mpath = os.path.join(folder, "metrics.jsonl")
        self.metrics = read_jsonl(mpath)
        if not self.metrics:
            raise InputError(f"{mpath}: no epoch finished yet (the file is empty)")
        for key in ("epoch", "step", "train_loss", "train_acc", "lr", "seconds", "images_per_s"):
            for r in self.metrics:
                need(r, key, mpath)
        # Each epoch is evaluated on the test split, or on the validation split (the test split
        # then at the end only).
        for r in self.metrics:
            if "test_acc" not in r and "val_acc" not in r:
                raise InputError(f"{mpath}: a record without 'test_acc' or 'val_acc': {r}")
        spath = os.path.join(folder, "steps.jsonl")
        self.steps = read_jsonl(spath) if os.path.exists(spath) else []
        # Steps per epoch from the records (the first epoch of a resumed run starts at its step).
        first = self.metrics[0]
        self.steps_per_epoch = first["step"] / first["epoch"] if first["epoch"] else 1
        wall = 0.0
        self.wall = []
        for r in self.metrics:
            wall += r["seconds"] + r.get("eval_seconds", 0.0)
            self.wall.append(wall)

    def col(self, key):
        return [r.get(key) for r in self.metrics]

    def points(self, x, key):
        """(x, value) of the records that hold `key`."""
        pairs = [(a, r[key]) for a, r in zip(x, self.metrics) if key in r]
        return [a for a, _ in pairs], [v for _, v in pairs]


DPI = 110  # of the PNGs; --dpi


def training_chart(runs, out):
    fig, axes = plt.subplots(2, 3, figsize=(16, 9))
    (loss_e, acc_e, lr_e), (loss_t, acc_t, ips_e) = axes
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, run in enumerate(runs):
        c = colours[i % len(colours)]
        epochs = run.col("epoch")
        if run.steps:
            x = [(s["step"] + 1) / run.steps_per_epoch for s in run.steps]
            loss_e.plot(x, [s["loss"] for s in run.steps], color=c, alpha=0.25, linewidth=0.6)
        loss_e.plot(epochs, run.col("train_loss"), color=c, marker="o", markersize=3, label=f"{run.label} train loss")
        loss_t.plot(run.wall, run.col("train_loss"), color=c, marker="o", markersize=3, label=run.label)
        for ax, x in ((acc_e, epochs), (acc_t, run.wall)):
            ax.plot(x, run.col("train_acc"), color=c, linestyle="-", marker="s", markersize=3, label=f"{run.label} train")
            for key, style, marker, name in (("val_acc", "-.", "D", "val"), ("test_acc", "--", "o", "test"),
                                             ("test_acc_tta", ":", "^", "test + TTA")):
                px, py = run.points(x, key)
                if py:
                    ax.plot(px, py, color=c, linestyle=style, marker=marker, markersize=3, label=f"{run.label} {name}")
        lr_e.plot(epochs, run.col("lr"), color=c, marker="o", markersize=3, label=run.label)
        ips_e.plot(epochs, run.col("images_per_s"), color=c, marker="o", markersize=3, label=run.label)
    for ax, title, xl, yl in (
            (loss_e, "training loss (faint: every step)", "epoch", "loss"),
            (acc_e, "accuracy", "epoch", "accuracy (%)"),
            (lr_e, "learning rate (at each epoch's last step)", "epoch", "lr"),
            (loss_t, "training loss against wall time", "wall time (s, training + evaluation)", "loss"),
            (acc_t, "accuracy against wall time", "wall time (s, training + evaluation)", "accuracy (%)"),
            (ips_e, "training throughput", "epoch", "images/s")):
        ax.set_title(title)
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("minidl: " + ", ".join(r.label for r in runs))
    fig.tight_layout()
    return save(fig, out, "training")


def load_profile(folder):
    path = os.path.join(folder, "profile.json")
    with open(path) as f:
        try:
            p = json.load(f)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}: not JSON ({e})")
    if not isinstance(p.get("rows"), list) or not p["rows"]:
        raise InputError(f"{path}: no 'rows' list (not a minidl profile)")
    for r in p["rows"]:
        for key in ("name", "fwd_host_ms", "bwd_host_ms"):
            need(r, key, path)
    return p


def profile_chart(profile, label, out, name):
    rows = profile["rows"]
    gpu = all("fwd_gpu_ms" in r for r in rows)
    sides = (("GPU", "gpu"), ("host", "host")) if gpu else (("host", "host"),)
    names = [r["name"] for r in rows]
    fig, axes = plt.subplots(1, len(sides), figsize=(7 * len(sides), 0.28 * len(rows) + 1.8), sharey=True, squeeze=False)
    for ax, (title, key) in zip(axes[0], sides):
        fwd = [r[f"fwd_{key}_ms"] for r in rows]
        bwd = [r[f"bwd_{key}_ms"] for r in rows]
        y = range(len(rows))
        ax.barh(y, fwd, color="#4c72b0", label="forward")
        ax.barh(y, bwd, left=fwd, color="#dd8452", label="backward")
        ax.set_yticks(list(y))
        ax.set_yticklabels(names, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(f"{title} ms per step (each row's own time)")
        total = profile.get("total", {})
        t = total.get(f"fwd_{key}_ms", 0) + total.get(f"bwd_{key}_ms", 0)
        ax.set_title(f"{title} time: {t:.3f} ms per step in all")
        # The % of limit belongs to the timed side: GPU time on CUDA, host time on the CPU.
        if key == sides[0][1]:
            for i, r in enumerate(rows):
                pct = limit_percent(r)
                if pct is not None:
                    ax.text(fwd[i] + bwd[i], i, f" {pct:.0f}%", va="center", fontsize=6)
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"minidl profile {label} on {profile.get('device', '?')}: "
                 f"median of {profile.get('measured_steps', '?')} steps")
    fig.tight_layout()
    return save(fig, out, name)


def limit_percent(row):
    """The row's % of the limit over both passes (time-weighted), or None without work or limits."""
    work = row.get("work")
    if not isinstance(work, dict):
        return None
    allowed = taken = 0.0
    for p in (work.get("fwd", {}), work.get("bwd", {})):
        if "fraction_of_limit" in p and p.get("ms", 0) > 0:
            allowed += p["fraction_of_limit"] * p["ms"]
            taken += p["ms"]
    return 100.0 * allowed / taken if taken > 0 else None


def roofline_chart(profile, label, out, name):
    limits = profile.get("limits")
    if not isinstance(limits, dict) or not limits.get("peak_tflops") or not limits.get("copy_gbs"):
        return []
    peak, bw = limits["peak_tflops"], limits["copy_gbs"]
    points = []  # (intensity, tflops, ms, name, backward)
    for r in profile["rows"]:
        work = r.get("work")
        if not isinstance(work, dict):
            continue
        for pas, backward in (("fwd", False), ("bwd", True)):
            p = work.get(pas, {})
            if p.get("flops", 0) > 0 and p.get("bytes", 0) > 0 and p.get("ms", 0) > 0:
                points.append((p["flops"] / p["bytes"], p["tflops"], p["ms"], r["name"], backward))
    if not points:
        return []
    fig, ax = plt.subplots(figsize=(9, 6))
    lo = min(min(p[0] for p in points), limits.get("ridge_flops_per_byte", 1)) / 4
    hi = max(max(p[0] for p in points), peak * 1e3 / bw) * 4
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(peak, bw * x / 1e3) for x in xs], color="black", lw=1.5,
            label=f"roofs: {peak:.1f} TFLOP/s ({limits.get('dtype', '?')} GEMM), {bw:.0f} GB/s (copy)")
    longest = sorted(points, key=lambda p: -p[2])[:8]
    for backward, marker, colour in ((False, "o", "#4c72b0"), (True, "^", "#dd8452")):
        sel = [p for p in points if p[4] == backward]
        if sel:
            ax.scatter([p[0] for p in sel], [max(p[1], 1e-6) for p in sel], marker=marker, color=colour,
                       s=[20 + 200 * p[2] / max(q[2] for q in points) for p in sel], alpha=0.75,
                       label="backward" if backward else "forward")
    for p in longest:
        ax.annotate(p[3] + (" bwd" if p[4] else ""), (p[0], max(p[1], 1e-6)), fontsize=6,
                    xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved, minimum bytes)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.grid(which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"minidl roofline {label} on {limits.get('device_name', profile.get('device', '?'))}: "
                 f"marker area = time; limits {limits.get('source', '?')}", fontsize=9)
    fig.tight_layout()
    return save(fig, out, name)


def load_confusion(folder):
    """(classes, confusion rows, per-class accuracy, TTA mode) from a run's summary.json, or None."""
    path = os.path.join(folder, "summary.json")
    if not os.path.exists(path):
        return None
    try:
        s = json.load(open(path))
    except ValueError as e:
        raise InputError(f"{path}: not JSON ({e})")
    if "confusion" not in s:
        return None
    classes, rows, acc = s.get("classes"), s["confusion"], s.get("per_class_acc")
    k = len(classes or [])
    if not (k and isinstance(rows, list) and len(rows) == k and all(isinstance(r, list) and len(r) == k for r in rows)
            and isinstance(acc, list) and len(acc) == k):
        raise InputError(f"{path}: classes, confusion and per_class_acc do not describe one K x K matrix")
    return classes, rows, acc, s.get("class_metrics_tta", "none")


def confusion_chart(confusion, label, out, name):
    classes, rows, acc, tta = confusion
    k = len(classes)
    share = [[c / max(1, sum(r)) for c in r] for r in rows]
    side = min(16, max(6, 0.35 * k + 3))
    fig, (heat, bars) = plt.subplots(1, 2, figsize=(side * 1.9, side), gridspec_kw={"width_ratios": [1.2, 0.8]})
    im = heat.imshow(share, cmap="Blues", vmin=0, vmax=1)
    ticks = list(range(k))
    fs = 8 if k <= 20 else 5
    heat.set_xticks(ticks)
    heat.set_yticks(ticks)
    heat.set_xticklabels(classes, rotation=90, fontsize=fs)
    heat.set_yticklabels(classes, fontsize=fs)
    heat.set_xlabel("predicted")
    heat.set_ylabel("true class")
    if k <= 20:
        for t in range(k):
            for p in range(k):
                heat.text(p, t, str(rows[t][p]), ha="center", va="center", fontsize=6,
                          color="white" if share[t][p] > 0.5 else "black")
    fig.colorbar(im, ax=heat, fraction=0.046, pad=0.04, label="share of the true class")
    values = [a if a is not None else 0 for a in acc]
    bars.barh(ticks, values, color="#4c72b0")
    bars.set_yticks(ticks)
    bars.set_yticklabels(classes, fontsize=fs)
    bars.invert_yaxis()
    bars.set_xlim(0, 100)
    bars.set_xlabel("test accuracy %")
    bars.grid(axis="x", alpha=0.3)
    total = sum(sum(r) for r in rows)
    overall = 100.0 * sum(rows[i][i] for i in range(k)) / max(1, total)
    fig.suptitle(f"minidl run {label}: test confusion ({total} images, {overall:.2f}%"
                 f"{'' if tta == 'none' else f', {tta} TTA'})")
    fig.tight_layout()
    return save(fig, out, name)


def save(fig, out, name):
    paths = []
    for ext in ("png", "svg"):
        path = os.path.join(out, f"{name}.{ext}")
        fig.savefig(path, dpi=DPI if ext == "png" else None)
        paths.append(path)
    plt.close(fig)
    return paths


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folders", nargs="+")
    p.add_argument("--out", help="folder for the charts (default: the first folder)")
    p.add_argument("--labels", help="comma-separated names for the folders (default: their names)")
    p.add_argument("--dpi", type=int, default=110, help="PNG resolution (default 110)")
    args = p.parse_args()
    global DPI
    DPI = args.dpi
    labels = args.labels.split(",") if args.labels else [os.path.basename(os.path.normpath(f)) for f in args.folders]
    if len(labels) != len(args.folders):
        raise InputError(f"--labels: {len(labels)} names for {len(args.folders)} folders")
    runs, profiles, confusions = [], [], []
    for folder, label in zip(args.folders, labels):
        metrics = os.path.join(folder, "metrics.jsonl")
        has_profile = os.path.exists(os.path.join(folder, "profile.json"))
        # `minidl profile` leaves an empty metrics.jsonl beside its profile.json.
        has_run = os.path.exists(metrics) and (os.path.getsize(metrics) > 0 or not has_profile)
        if not (has_run or has_profile):
            raise InputError(f"{folder}: neither metrics.jsonl (a run) nor profile.json (a profile) is there")
        if has_run:
            runs.append(Run(folder, label))
            confusion = load_confusion(folder)
            if confusion:
                confusions.append((confusion, label))
        if has_profile:
            profiles.append((load_profile(folder), label))
    out = args.out or args.folders[0]
    os.makedirs(out, exist_ok=True)
    written = training_chart(runs, out) if runs else []
    for profile, label in profiles:
        written += profile_chart(profile, label, out, "profile" if len(profiles) == 1 else f"profile_{label}")
        written += roofline_chart(profile, label, out, "roofline" if len(profiles) == 1 else f"roofline_{label}")
    for confusion, label in confusions:
        written += confusion_chart(confusion, label, out, f"confusion_{label}")
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except InputError as e:
        print(f"plot.py: {e}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:
        print(f"plot.py: {e}", file=sys.stderr)
        sys.exit(2)
