#!/usr/bin/env python3
"""minidl configs and PyTorch airbench-style scripts on the same CIFAR-10, N runs each, in one table.

    scripts/bench/side_by_side.py --minidl build/minidl --data CIFAR10_DIR --runs 25 \\
        --config configs/airbench94_record.json --config configs/airbench94_muon.json \\
        --torch-script path/to/cifar10_speedrun.py --work OUT

Each --config row is `minidl bench accuracy --config PATH --device DEVICE --runs N` (extra
arguments may follow the path in the same string: "configs/x.json --set optimizer.lr=0.2"): N seeds,
each timed from the data in device memory through the model build, whitening, training and the
final TTA evaluation, after one warm-up run.

Each --torch-script row runs an airbench-style script (KellerJordan's airbench94*.py, the CIFAR-10
speedrun record's cifar10_speedrun.py) unchanged, in WORK, where it reads cifar10/train.pt and
cifar10/test.pt: {"images": uint8 N x 32 x 32 x 3, "labels": int64 N, "classes": names}, written
here from the CIFAR-10 binaries in --data (so both sides see the same pixels; nothing is
downloaded; written again only when the binaries are newer). Such a script prints a table with a
header row naming "run", "tta_val_acc" and a time column ("time_seconds" or
"total_time_seconds"), then one row per finished run whose tta_val_acc is filled; rows of a run
named "warmup" are left out. The script is stopped once N runs are in (these scripts run 200 or
more), or when it ends or times out. Its timing is its own: the record's counts whitening,
training and TTA with the data on the GPU, after compilation and a warm-up run.

Every row is saved as WORK/<name>.json as soon as it is done; --table prints the table from the
rows saved in WORK without running anything (so a long comparison can run in parts). The table:
mean and standard deviation (n - 1) of the TTA accuracy and of the seconds per run. Writing the
.pt files needs PyTorch; the scripts need PyTorch and torchvision importable.
"""
import argparse
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import threading

RECORD = 3073  # a CIFAR-10 binary record: the label byte, then 3 x 32 x 32 pixels (C, H, W)


def binaries(data):
    train = [os.path.join(data, f"data_batch_{i}.bin") for i in range(1, 6)]
    test = [os.path.join(data, "test_batch.bin")]
    for p in train + test:
        if not os.path.isfile(p):
            sys.exit(f"side_by_side: no CIFAR-10 binary {p} (scripts/data.sh makes the folder)")
    return train, test


def class_names(data):
    meta = os.path.join(data, "batches.meta.txt")
    names = [line.strip() for line in open(meta)] if os.path.isfile(meta) else []
    names = [n for n in names if n]
    return names if len(names) == 10 else ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                                           "ship", "truck"]


def write_pt(data, work):
    """WORK/cifar10/{train,test}.pt from the binaries, unless both are newer than every binary."""
    train, test = binaries(data)
    folder = os.path.join(work, "cifar10")
    os.makedirs(folder, exist_ok=True)
    outputs = {"train.pt": train, "test.pt": test}
    newest = max(os.path.getmtime(p) for p in train + test)
    if all(os.path.isfile(os.path.join(folder, n)) and os.path.getmtime(os.path.join(folder, n)) > newest
           for n in outputs):
        return True
    try:
        import torch
    except ImportError:
        print("side_by_side: PyTorch is not importable: cannot write cifar10/train.pt and test.pt, the PyTorch rows "
              "are skipped", flush=True)
        return False
    for name, files in outputs.items():
        raw = b"".join(open(p, "rb").read() for p in files)
        if len(raw) % RECORD:
            sys.exit(f"side_by_side: {files} hold {len(raw)} bytes, not whole {RECORD}-byte CIFAR-10 records")
        records = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(-1, RECORD)
        images = records[:, 1:].reshape(-1, 3, 32, 32).permute(0, 2, 3, 1).contiguous()
        labels = records[:, 0].to(torch.int64)
        torch.save({"images": images, "labels": labels, "classes": class_names(data)}, os.path.join(folder, name))
        print(f"side_by_side: wrote {os.path.join(folder, name)} ({len(labels)} images)", flush=True)
    return True


def stats(values):
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return mean, std


def row_name(label):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_")


def save_row(work, label, kind, tta, seconds, note=""):
    row = {"label": label, "kind": kind, "tta_acc": tta, "seconds": seconds, "note": note}
    with open(os.path.join(work, row_name(label) + ".json"), "w") as f:
        json.dump(row, f, indent=2)
    return row


def run_minidl(args, spec):
    words = shlex.split(spec)
    config, extra = words[0], words[1:]
    label = "minidl " + " ".join([os.path.basename(config)] + extra)
    out = os.path.join(args.work, row_name(label) + ".bench.json")
    cmd = [args.minidl, "bench", "accuracy", "--config", config, "--device", args.device, "--runs", str(args.runs),
           "--json", out] + extra
    env = dict(os.environ, CIFAR10_DIR=os.path.abspath(args.data))
    print("side_by_side: " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    rc = subprocess.call(cmd, env=env, timeout=args.timeout)
    if rc != 0 or not os.path.isfile(out):
        print(f"side_by_side: {label}: minidl exited {rc}", flush=True)
        return None
    j = json.load(open(out))
    runs = j["runs"]
    note = "" if j.get("same_seed_same_bits", True) else "same seed gave other bits"
    return save_row(args.work, label, "minidl", [r["tta_acc"] for r in runs], [r["seconds"] for r in runs], note)


def cells(line):
    """The cells of a '|  a  |  b  |' table row, or None."""
    line = line.strip()
    if not (line.startswith("|") and line.endswith("|")):
        return None
    return [c.strip() for c in line[1:-1].split("|")]


class RunTable:
    """Reads an airbench-style table line by line and collects the finished runs."""

    def __init__(self):
        self.columns = None
        self.tta, self.seconds = [], []

    def feed(self, line):
        c = cells(line)
        if c is None:
            return
        if "tta_val_acc" in c and "run" in c:
            self.columns = c
            return
        if self.columns is None or len(c) != len(self.columns):
            return
        row = dict(zip(self.columns, c))
        time_key = next((k for k in ("time_seconds", "total_time_seconds") if k in row), None)
        if not row.get("tta_val_acc") or time_key is None or not row[time_key] or row["run"] == "warmup":
            return
        try:
            tta, secs = float(row["tta_val_acc"]), float(row[time_key])
        except ValueError:
            return
        self.tta.append(100 * tta if tta <= 1 else tta)  # the scripts print a fraction
        self.seconds.append(secs)


def stop(proc):
    """Ends the script and what it started (its own session), first asking, then not."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def run_torch(args, script):
    label = "torch " + os.path.basename(script)
    table = RunTable()
    cmd = [args.python, os.path.abspath(script)]
    print("side_by_side: " + " ".join(cmd) + f" (in {args.work}; stopped after {args.runs} runs)", flush=True)
    log = open(os.path.join(args.work, row_name(label) + ".log"), "w")
    proc = subprocess.Popen(cmd, cwd=args.work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    timed_out = threading.Event()

    def time_out():
        timed_out.set()
        stop(proc)

    timer = threading.Timer(args.timeout, time_out)
    timer.start()
    note, pending = "", b""
    try:
        while len(table.tta) < args.runs:
            chunk = proc.stdout.read1(65536)
            if not chunk:
                break
            log.write(chunk.decode(errors="replace"))
            log.flush()
            pending += chunk
            # The scripts rewrite a running-mean line with '\r': split on it too.
            lines = re.split(rb"[\r\n]", pending)
            pending = lines.pop()
            for line in lines:
                table.feed(line.decode(errors="replace"))
    finally:
        timer.cancel()
        stop(proc)
        log.close()
    if timed_out.is_set():
        note = f"timed out after {args.timeout:g} s"
    if not table.tta:
        why = f"exit {proc.returncode}" + (f", {note}" if note else "")
        print(f"side_by_side: {label}: no finished run read ({why}); its output is in {log.name}", flush=True)
        return None
    if len(table.tta) < args.runs and not note:
        note = f"ended after {len(table.tta)} of {args.runs} runs"
    return save_row(args.work, label, "torch", table.tta[:args.runs], table.seconds[:args.runs], note)


def print_table(rows):
    print(f"{'run':52s} {'runs':>4s}  {'TTA accuracy':>20s}  {'seconds per run':>20s}  note")
    for r in rows:
        (ta, ts), (sa, ss) = stats(r["tta_acc"]), stats(r["seconds"])
        print(f"{r['label'][:52]:52s} {len(r['tta_acc']):4d}  {ta:9.2f}% (std {ts:.2f})  {sa:9.3f} s (std {ss:.3f})  "
              f"{r.get('note', '')}")


def saved_rows(work):
    rows = []
    for name in sorted(os.listdir(work)):
        if name.endswith(".json") and not name.endswith(".bench.json"):
            j = json.load(open(os.path.join(work, name)))
            if isinstance(j, dict) and "tta_acc" in j and "seconds" in j:
                rows.append(j)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minidl", help="the minidl binary (needed with --config)")
    p.add_argument("--data", help="the CIFAR-10 binaries' folder (data_batch_1..5.bin, test_batch.bin)")
    p.add_argument("--config", action="append", default=[], help="a minidl config, extra arguments allowed")
    p.add_argument("--torch-script", action="append", default=[], help="an airbench-style PyTorch script")
    p.add_argument("--runs", type=int, default=25, help="runs of each (default 25)")
    p.add_argument("--work", required=True, help="the folder for the .pt files, logs and saved rows")
    p.add_argument("--device", default="cuda", help="minidl's --device (default cuda)")
    p.add_argument("--python", default=sys.executable, help="the Python that runs the scripts")
    p.add_argument("--timeout", type=float, default=1800, help="seconds each row may take (default 1800)")
    p.add_argument("--table", action="store_true", help="only print the table of the rows saved in --work")
    args = p.parse_args()
    if args.runs < 1:
        p.error("--runs must be at least 1")
    os.makedirs(args.work, exist_ok=True)
    if not args.table:
        if not args.config and not args.torch_script:
            p.error("nothing to run: give --config and/or --torch-script (or --table)")
        if args.config and not args.minidl:
            p.error("--config needs --minidl")
        if not args.data:
            p.error("--data is required to run anything")
        binaries(args.data)
        failed = False
        for spec in args.config:
            failed |= run_minidl(args, spec) is None
        if args.torch_script:
            if write_pt(args.data, args.work):
                for script in args.torch_script:
                    if not os.path.isfile(script):
                        sys.exit(f"side_by_side: no script {script}")
                    failed |= run_torch(args, script) is None
            else:
                failed = True
    rows = saved_rows(args.work)
    if not rows:
        sys.exit("side_by_side: no row to print")
    print_table(rows)
    return 1 if not args.table and failed else 0


if __name__ == "__main__":
    sys.exit(main())
