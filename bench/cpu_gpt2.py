#!/usr/bin/python3
"""CPU training speed: mtc's emitted program against PyTorch, GPT-2 124M.

    /usr/bin/python3 bench/cpu_gpt2.py [--T 64 256] [--steps 6] [--rounds 3]
        [--precision fp32|bf16] [--python PYTHON]

For each sequence length T (batch B=4, AdamW): compiles examples/gpt2.mtc at
the 124M dims (`mtc compile ... && make cpu`), then alternates, --rounds
times, one run of each side in fresh processes, --steps steps each:

  --precision fp32 (default)  mtc fp32 and PyTorch fp32 (an nn.Module with
                              AdamW, torch.set_num_threads = cores);
  --precision bf16            mtc bf16 (fp32 master weights), mtc fp32, and
                              PyTorch with torch.autocast("cpu", bfloat16)
                              over fp32 parameters, as users train.

The PyTorch side runs on --python (default: this interpreter): for a current
PyTorch from PyPI, make a virtualenv (python3 -m venv .venv-bench &&
.venv-bench/bin/pip install torch numpy) and pass its python. Every side
prints the time of every step; the first two steps of every run are warm-up
and are dropped. Prints a Markdown table: the median ms/step over the kept
steps of all rounds, tokens/s at that median, the peak RSS of the process
(largest over rounds), the first loss, and each step time over PyTorch's.

All sides get the same machine; the order alternates round by round so that
drift (other load, clock changes) hits all. Other processes on the machine
distort them, OpenMP programs most (a thread that waits at a barrier for a
preempted sibling spins): before each run the script waits (up to --wait
seconds) until the CPUs are idle, and it prints, for every run, the share of
the CPUs that other processes used while it ran. Debian's OpenBLAS 0.3.21
does not know some newer Intel CPUs and falls back to its slow generic
kernels there (corename "Prescott"); Debian's PyTorch runs its GEMMs on that
OpenBLAS, so by default (--torch-blas auto) the PyTorch runs get
OPENBLAS_CORETYPE=SkylakeX on a CPU with AVX-512 (Haswell with AVX2) when
that happens: the stronger baseline (PyPI's PyTorch uses oneDNN and MKL and
is not affected). mtc does not use BLAS. `--torch-blas default` leaves
OpenBLAS alone.

Needs the build (cmake -S . -B build && cmake --build build) and cc, make,
OpenMP.
"""
import argparse
import ctypes
import math
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
B, C, L, NH, V = 4, 768, 12, 12, 50257
STEP_RE = re.compile(r"^step (\d+)(?:/\d+)? \| loss ([-0-9.naninf]+) \| ([0-9.]+) ms")


# ---------------------------------------------------------------------------
# the PyTorch side (runs in its own process: --torch-worker T STEPS)

def torch_worker(T, steps, precision):
    import contextlib
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(os.cpu_count())
    torch.manual_seed(1337)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.attproj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
            self.register_buffer("causal", torch.tril(torch.ones(T, T, dtype=torch.bool)))

        def forward(self, x):
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
            q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // NH))
            att = F.softmax(att.masked_fill(~self.causal, float("-inf")), dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            x = x + self.attproj(y)
            return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):  # nanoGPT's GPT-2, the LM head tied to wte
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            self.h = nn.ModuleList(Block() for _ in range(L))
            self.lnf = nn.LayerNorm(C)
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, 0.0, 0.02)
                elif name.endswith("bias"):
                    nn.init.zeros_(p)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(T))
            for block in self.h:
                x = block(x)
            logits = F.linear(self.lnf(x), self.wte.weight)
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.0)
    idx = torch.randint(0, V, (B, T))
    targets = torch.randint(0, V, (B, T))
    blas = openblas_corename()
    print(f"torch {torch.__version__} | {precision} | threads {torch.get_num_threads()} | "
          f"OpenBLAS core {blas}", flush=True)
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if precision == "bf16" \
        else contextlib.nullcontext
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = model(idx, targets)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        print(f"step {step} | loss {loss.item():.6f} | {1e3 * dt:.1f} ms", flush=True)


def openblas_corename():
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return "unknown"


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def torch_env(mode):
    """The environment of the PyTorch runs and a note saying what was set."""
    env = dict(os.environ)
    if mode == "default":
        return env, "OpenBLAS as installed"
    if mode != "auto":
        env["OPENBLAS_CORETYPE"] = mode
        return env, f"OPENBLAS_CORETYPE={mode}"
    core = openblas_corename()
    if core.lower() in ("prescott", "core2", "nehalem", "katmai", "unknown") \
            and "OPENBLAS_CORETYPE" not in os.environ:
        flags = cpu_flags()
        best = "SkylakeX" if "avx512f" in flags else "Haswell" if "avx2" in flags else None
        if best:
            env["OPENBLAS_CORETYPE"] = best
            return env, (f"OpenBLAS detects this CPU as {core}; PyTorch runs with "
                         f"OPENBLAS_CORETYPE={best}")
    return env, f"OpenBLAS core {core}"


# ---------------------------------------------------------------------------
# running and measuring

def cpu_ticks():
    """(busy, total) clock ticks of all CPUs so far, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def wait_for_idle(limit_s, busy_max=0.15):
    """Waits until the CPUs were at most busy_max busy over one second (or
    limit_s passed); returns the busy share last seen."""
    t0 = time.time()
    while True:
        b0, t_0 = cpu_ticks()
        time.sleep(1.0)
        b1, t_1 = cpu_ticks()
        busy = (b1 - b0) / max(1, t_1 - t_0)
        if busy <= busy_max or time.time() - t0 >= limit_s:
            return busy

def run(cmd, cwd, env):
    """Runs cmd; returns (step times in ms, losses, peak RSS bytes, output,
    wall seconds, share of the CPUs used by other processes meanwhile)."""
    hz = os.sysconf("SC_CLK_TCK")
    b0, _ = cpu_ticks()
    t0 = time.time()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.time() - t0
    b1, _ = cpu_ticks()
    own = (usage.ru_utime + usage.ru_stime) * hz
    others = max(0.0, (b1 - b0 - own) / hz / wall / os.cpu_count())
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{out}")
    times, losses = [], []
    for line in out.splitlines():
        m = STEP_RE.match(line)
        if m:
            losses.append(float(m.group(2)))
            times.append(float(m.group(3)))
    if not times:
        sys.exit(f"{' '.join(cmd)} printed no steps:\n{out}")
    return times, losses, usage.ru_maxrss * 1024, out, wall, others


def build_mtc(mtc, T, precision, out):
    dims = f"-D L={L} -D C={C} -D NH={NH} -D V={V} -D T={T} -D B={B}".split()
    os.makedirs(os.path.dirname(out), exist_ok=True)
    subprocess.run([mtc, "compile", os.path.join(ROOT, "examples/gpt2.mtc"), *dims,
                    "--precision", precision, "-o", out], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["make", "-s", "-C", out, "cpu"], check=True)


def fmt_bytes(n):
    return f"{n / 2**30:.2f} GiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--T", type=int, nargs="+", default=[64, 256], help="sequence lengths")
    ap.add_argument("--steps", type=int, default=6, help="steps per run (2 are warm-up)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating runs of each side")
    ap.add_argument("--mtc", default=os.path.join(ROOT, "build/mtc"))
    ap.add_argument("--out", default="/tmp/mtc_bench", help="where the programs are built")
    ap.add_argument("--wait", type=float, default=120,
                    help="most seconds to wait for idle CPUs before each run")
    ap.add_argument("--torch-blas", default="auto",
                    help="auto | default | an OPENBLAS_CORETYPE for the PyTorch runs")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                    help="fp32: mtc and PyTorch in fp32; bf16: mtc bf16, mtc fp32 and "
                    "PyTorch's bf16 autocast")
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter of the PyTorch side")
    ap.add_argument("--torch-worker", nargs=3, metavar=("T", "STEPS", "PRECISION"),
                    help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_worker:
        torch_worker(int(a.torch_worker[0]), int(a.torch_worker[1]), a.torch_worker[2])
        return
    if a.steps < 3:
        sys.exit("--steps must be at least 3 (the first two are warm-up)")

    tenv, tnote = torch_env(a.torch_blas)
    p = a.precision
    mtc_sides = ["bf16", "fp32"] if p == "bf16" else ["fp32"]
    print(f"GPT-2 124M (L={L} C={C} NH={NH} V={V}), B={B}, {p}, AdamW; {os.cpu_count()} "
          f"cores; {a.rounds} alternating rounds of {a.steps} steps, first 2 dropped")
    print(f"PyTorch: {a.python}; {tnote}")
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    rows = []
    for T in a.T:
        order = []
        for mp in mtc_sides:
            out = os.path.join(a.out, f"gpt2_124M_T{T}_{mp}")
            build_mtc(a.mtc, T, mp, out)
            order.append((f"mtc {mp}", ["./train", "--steps", str(a.steps)], out,
                          dict(os.environ)))
        torch_cmd = [a.python, os.path.abspath(__file__), "--torch-worker", str(T),
                     str(a.steps), p]
        order.append((f"pytorch {p}", torch_cmd, ROOT, tenv))
        kept = {name: [] for name, *_ in order}
        rss = {name: 0 for name in kept}
        loss = {}
        for r in range(a.rounds):
            for name, cmd, cwd, env in (order if r % 2 == 0 else order[::-1]):
                idle_wait = wait_for_idle(a.wait)
                times, losses, peak, out_text, wall, others = run(cmd, cwd, env)
                if r == 0 and name.startswith("pytorch"):
                    print("  " + out_text.splitlines()[0])
                kept[name] += times[2:]
                rss[name] = max(rss[name], peak)
                loss.setdefault(name, losses[0])
                print(f"  T={T} round {r + 1} {name:12s}: median "
                      f"{statistics.median(times[2:]):8.1f} ms/step "
                      f"(steps {', '.join(f'{t:.0f}' for t in times)}) [{wall:.0f} s; "
                      f"CPUs busy before {100 * idle_wait:.0f}%, others during "
                      f"{100 * others:.0f}%]", flush=True)
        med = {k: statistics.median(v) for k, v in kept.items()}
        ref = med[f"pytorch {p}"]
        for name in kept:
            rows.append((T, name, med[name], B * T / (med[name] / 1e3), rss[name],
                         loss[name], med[name] / ref))
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    print()
    print(f"| T | program | median ms/step | tokens/s | peak RSS | first loss | "
          f"vs PyTorch {p} |")
    print("|---|---|---|---|---|---|---|")
    for T, name, ms, tps, peak, l0, ratio in rows:
        print(f"| {T} | {name} | {ms:.0f} | {tps:.0f} | {fmt_bytes(peak)} | {l0:.3f} | "
              f"{ratio:.2f}x |")

if __name__ == "__main__":
    main()
