#!/usr/bin/env python3
"""Draws a training log: the loss per step (and the validation loss, where the
log has it) from the JSON lines `train --log FILE.jsonl` writes.

    python3 tools/plot_log.py run.jsonl [more.jsonl ...] -o loss.png [--smooth N]

Each log is one curve (labelled by its file name); --smooth N adds the mean of
the last N steps as a line over the raw points. Needs matplotlib (from PyPI in
a virtualenv: python3 -m venv .venv-plot && .venv-plot/bin/pip install
matplotlib); records it does not know are skipped.
"""
import argparse
import json
import os
import sys


def read_log(path):
    """(train, val): lists of (step, loss) pairs, losses that are null left out."""
    train, val = [], []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{number}: not a JSON line ({e.msg}): is this a train --log file?")
            if rec.get("loss") is None or "step" not in rec:
                continue
            (val if rec.get("kind") == "val" else train).append((rec["step"], rec["loss"]))
    return train, val


def running_mean(ys, n):
    out, total = [], 0.0
    for i, y in enumerate(ys):
        total += y
        if i >= n:
            total -= ys[i - n]
        out.append(total / min(i + 1, n))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs", nargs="+", help="train --log files (JSON lines)")
    ap.add_argument("-o", "--out", required=True, help="the image to write (.png, .svg, .pdf)")
    ap.add_argument("--smooth", type=int, default=0, help="running mean over N steps")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_log.py needs matplotlib: pip install matplotlib (in a virtualenv)")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for path in args.logs:
        train, val = read_log(path)
        if not train and not val:
            sys.exit(f"{path}: no step with a loss")
        name = os.path.basename(path)
        if train:
            xs, ys = zip(*train)
            line, = ax.plot(xs, ys, lw=0.8, alpha=0.5 if args.smooth > 1 else 1.0,
                            label=f"{name} train")
            if args.smooth > 1:
                ax.plot(xs, running_mean(list(ys), args.smooth), color=line.get_color(), lw=1.6,
                        label=f"{name} train (mean of {args.smooth})")
        if val:
            xs, ys = zip(*val)
            ax.plot(xs, ys, "o-", lw=1.4, ms=3, label=f"{name} val")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
