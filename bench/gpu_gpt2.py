#!/usr/bin/env python3
"""GPU training speed: mtc's emitted program against PyTorch, GPT-2 on one GPU.

    python3 bench/gpu_gpt2.py --mtc DIR [--mtc DIR ...] [--size 124M] [--B 8]
        [--T 1024] [--steps 20] [--rounds 2] [--torch eager-bf16,compile-bf16]

Runs on a machine with a CUDA GPU and PyTorch (tools/gpu_check.sh runs it on
the lent device). Each --mtc DIR is an emitted program built with `make`
(DIR/train) for the same dims; its label is DIR's name. Each --torch mode is
nanoGPT's GPT-2 (the LM head tied to wte, scaled_dot_product_attention,
fused AdamW), in fresh processes: eager or torch.compile, in bf16 autocast
(fp32 master weights) or fp32 (TF32 off, as mtc's fp32 build). Runs alternate
round by round; the first 3 steps of every run are warm-up and are dropped.

Prints a Markdown table (a run that fails, out of memory say, leaves its row
empty): median ms/step over the kept steps, tokens/s at that
median, MFU, and peak device memory (PyTorch: max_memory_reserved; mtc: the
device memory the program measured, cudaMemGetInfo). MFU counts
6N + 6LCT FLOPs per token (N: the parameters, wte once; llm.c's count) over
the GPU's dense peak for the run's precision (--peak-bf16, --peak-fp32 in
TFLOP/s; H100 SXM: 989 and 67). mtc's rows also give the step the planner
predicted for the program's layout, and the GPU it predicted it for (the
program prints it at its end).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

SIZES = {"124M": (12, 768, 12), "350M": (24, 1024, 16)}  # L, C, NH
V = 50257
PLANNER_RE = re.compile(r"\| planner, on ([^:]+): ([0-9.e+-]+) ms")  # train's last line
STEP_RE = re.compile(r"^step (\d+)(?:/\d+)? \| loss ([-0-9.naninfe+]+) \| ([0-9.]+) ms")
MEM_RE = re.compile(r"\(cudaMemGetInfo\) (\d+) bytes")
WARMUP = 3


def torch_worker(args):
    """One PyTorch run: prints `step N | loss X | T ms` lines and a JSON line."""
    import math
    import time

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    L, C, NH = SIZES[args.size]
    B, T = args.B, args.T
    compiled, dtype = args.worker.split("-")
    torch.manual_seed(1337)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.attproj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
            q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.attproj(y.transpose(1, 2).contiguous().view(B, T, C))
            return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            self.h = nn.ModuleList(Block() for _ in range(L))
            self.lnf = nn.LayerNorm(C)
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                    nn.init.normal_(p, 0.0, std)
                elif name.endswith("bias"):
                    nn.init.zeros_(p)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
            for blk in self.h:
                x = blk(x)
            logits = self.lnf(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.view(-1, V).float(), targets.view(-1))

    model = GPT().to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.0,
                            fused=True)
    step_fn = torch.compile(model) if compiled == "compile" else model
    g = torch.Generator(device="cpu").manual_seed(args.seed)
    idx = torch.randint(0, V, (B, T), generator=g).to(dev)
    targets = torch.randint(0, V, (B, T), generator=g).to(dev)
    for step in range(1, args.steps + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(dtype == "bf16")):
            loss = step_fn(idx, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        lv = loss.item()  # synchronizes
        ms = (time.perf_counter() - t0) * 1e3
        print(f"step {step} | loss {lv:.6f} | {ms:.3f} ms", flush=True)
    print(json.dumps({"params": nparams, "peak": torch.cuda.max_memory_reserved()}), flush=True)


def run(cmd, cwd=None, timeout=None):
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    sys.stdout.write(p.stdout[-4000:])
    sys.stderr.write(p.stderr[-4000:])
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}")
    return p.stdout


def step_times(out):
    ms = [float(m.group(3)) for m in map(STEP_RE.match, out.splitlines()) if m]
    return ms[WARMUP:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mtc", action="append", default=[], help="an emitted program's folder")
    ap.add_argument("--size", default="124M", choices=sorted(SIZES))
    ap.add_argument("--B", type=int, default=8)
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--torch", default="eager-bf16,compile-bf16",
                    help="PyTorch modes: eager|compile - bf16|fp32, comma-separated")
    ap.add_argument("--peak-bf16", type=float, default=989.0)
    ap.add_argument("--peak-fp32", type=float, default=67.0)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return torch_worker(args)

    L, C, NH = SIZES[args.size]
    runs = {}  # label -> {"ms": [...], "peak": bytes, "prec": "bf16"|"fp32", "planned": ms}
    modes = [m for m in args.torch.split(",") if m]
    nparams = None
    for rnd in range(args.rounds):
        order = [("mtc", d) for d in args.mtc] + [("torch", m) for m in modes]
        if rnd % 2:
            order.reverse()
        for kind, what in order:
            label = ("mtc " + os.path.basename(os.path.normpath(what)) if kind == "mtc"
                     else "torch " + what)
            prec = ("bf16" if "bf16" in label else "fp32") if kind == "mtc" else what.split("-")[1]
            r = runs.setdefault(label, {"ms": [], "peak": 0, "prec": prec})
            try:  # a run that fails (out of memory) leaves its row empty, the others go on
                if kind == "mtc":
                    out = run(["./train", "--steps", str(args.steps), "--seed", str(args.seed)],
                              cwd=what, timeout=args.timeout)
                    m = MEM_RE.search(out)
                    peak = int(m.group(1)) if m else 0
                    p = PLANNER_RE.search(out)
                    if p:
                        r["planned"] = f"{float(p.group(2)):.1f} ({p.group(1)})"
                else:
                    out = run([sys.executable, __file__, "--worker", what, "--size", args.size,
                               "--B", str(args.B), "--T", str(args.T), "--steps",
                               str(args.steps), "--seed", str(args.seed)], timeout=args.timeout)
                    info = json.loads(out.strip().splitlines()[-1])
                    nparams, peak = info["params"], info["peak"]
            except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
                print(f"{label}: failed: {e}", file=sys.stderr)
                continue
            r["ms"] += step_times(out)
            r["peak"] = max(r["peak"], peak)
    if nparams is None:  # GPT-2's parameters, wte counted once
        nparams = V * C + args.T * C + L * (12 * C * C + 13 * C) + 2 * C
    flops_tok = 6 * nparams + 6 * L * C * args.T
    tokens = args.B * args.T
    print(f"\nGPT-2 {args.size}, B={args.B}, T={args.T}, {nparams / 1e6:.1f}M parameters, "
          f"{flops_tok / 1e9:.2f} GFLOP/token; MFU over {args.peak_bf16:g} TFLOP/s (bf16) "
          f"or {args.peak_fp32:g} (fp32)\n")
    print("| program | ms/step | tokens/s | MFU | peak device memory | planner's ms/step |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, r in runs.items():
        planned = r.get("planned", "-")
        if not r["ms"]:
            print(f"| {label} | - | - | - | - | {planned} |")
            continue
        ms = statistics.median(r["ms"])
        tps = tokens / (ms / 1e3)
        peak = args.peak_bf16 if r["prec"] == "bf16" else args.peak_fp32
        mfu = tps * flops_tok / (peak * 1e12)
        print(f"| {label} | {ms:.1f} | {tps:,.0f} | {100 * mfu:.1f}% | "
              f"{r['peak'] / 2**30:.2f} GiB | {planned} |")


if __name__ == "__main__":
    sys.exit(main())
