#!/usr/bin/python3
"""Compare an mtc training program's numbers with PyTorch's reference.

    parity_check.py grads REF.safetensors GOT.safetensors [--tol 1e-4]
    parity_check.py losses REF.json KEY LOG [--tol 1e-4] [--steps N]
    parity_check.py logs REF.log GOT.log [--tol 1e-5]
    parity_check.py cosine REF.safetensors GOT.safetensors [--min 0.999]

`grads` compares every tensor of the reference (PyTorch's gradients after one
backward) with the tensor of the same name that `train --dump-grads` wrote,
and prints the max difference per tensor as llm.c's test does. A tensor in
GOT that PyTorch has no gradient for (a float buffer the ONNX file stores as
an initializer) must be all zeros.

`logs` compares the losses two `train` runs printed, step by step (a run on
N ranks against the one-rank program), and their gradient norms (within ten
times the tolerance, at least 1e-4: gradients move more than the loss).

`losses` compares the losses printed by `train` (lines `step N | loss X | ...`
in LOG) with REF.json's KEY: "loss" (one number: the first loss) or "adamw" /
"sgd" (the losses of the first steps; --steps N: only the first N).

The error of a tensor is max|a - b| / max|b| (b the reference; max|a - b| when
b is all zeros); of a loss, |a - b| / |b|. Exit status 0 when every error is
within --tol, 1 otherwise.

Needs only numpy (and reads safetensors itself, so the `safetensors` module
is not needed). The reader and writer here are also used by the scripts that
make the references (tools/parity_*.py).
"""
import argparse
import json
import re
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64,
          "F16": np.float16, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def st_read(path):
    """{name: numpy array} from a safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        dt = np.dtype(DTYPES[e["dtype"]]).newbyteorder("<")
        out[name] = np.frombuffer(data[begin:end], dtype=dt).reshape(e["shape"])
    return out


def st_write(path, tensors, metadata=None):
    """Writes {name: numpy array} (float32, float64, int32, int64) as safetensors."""
    names = {np.dtype(v): k for k, v in DTYPES.items()}
    header, chunks, at = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        raw = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": names[a.dtype], "shape": list(a.shape),
                        "data_offsets": [at, at + len(raw)]}
        chunks.append(raw)
        at += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)


# A gradient is compared relative to its tensor's scale, but never a scale below this share of the
# largest gradient of the model: a gradient that is zero in exact arithmetic (a key bias: softmax
# does not see it) holds rounding noise in PyTorch's reference (1e-12), not a scale.
GRAD_FLOOR = 1e-6


def rel_error(got, ref, floor=0.0):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    diff = float(np.max(np.abs(got - ref))) if ref.size else 0.0
    scale = max(float(np.max(np.abs(ref))) if ref.size else 0.0, floor)
    return diff, (diff / scale if scale > 0 else diff)


def check_grads(ref_path, got_path, tol, what="gradients", floor_share=GRAD_FLOOR):
    """Every tensor of ref against got's of that name; got's others must be zero (gradients of
    what PyTorch does not train), unless `what` is not "gradients" (got holds more: weights)."""
    ref, got = st_read(ref_path), st_read(got_path)
    ok = True
    print(f"{what}: max|mtc - torch| / max|torch| per tensor, the scale at least {floor_share:g} of "
          f"the largest (tolerance {tol:g})")
    width = max(len(n) for n in list(ref) + list(got))
    floor = floor_share * max((float(np.max(np.abs(r))) for r in ref.values() if r.size), default=0.0)
    worst = 0.0
    for name, r in ref.items():
        if name not in got:
            print(f"  FAIL {name:<{width}}  missing from {got_path}")
            ok = False
            continue
        g = got[name]
        if g.shape != r.shape:
            print(f"  FAIL {name:<{width}}  shape {list(g.shape)}, torch {list(r.shape)}")
            ok = False
            continue
        diff, rel = rel_error(g, r, floor)
        worst = max(worst, rel)
        good = rel <= tol
        ok &= good
        print(f"  {'OK  ' if good else 'FAIL'} {name:<{width}}  {str(list(r.shape)):<14} "
              f"maxdiff {diff:.3e}  rel {rel:.3e}")
    for name, g in got.items():
        if name in ref or what != "gradients":
            continue
        zero = not np.any(g)
        ok &= zero
        print(f"  {'OK  ' if zero else 'FAIL'} {name:<{width}}  not a PyTorch parameter; "
              f"max|grad| {float(np.max(np.abs(g))) if g.size else 0.0:.3e} (must be 0)")
    print(f"{what}: {len(ref)} tensors, worst relative error {worst:.3e}: "
          f"{'ok' if ok else 'FAIL'}")
    return ok


def check_cosine(ref_path, got_path, least):
    """Mixed precision: each gradient's direction against PyTorch's bf16 one
    (cosine similarity at least `least`); their sizes are compared by the loss
    trajectory. A tensor whose reference is zero in exact arithmetic (its
    largest element below GRAD_FLOOR of the model's largest gradient) holds
    rounding noise in both: it must be as small in mtc's."""
    ref, got = st_read(ref_path), st_read(got_path)
    ok, worst = True, 1.0
    print(f"gradients: cosine similarity to torch per tensor (at least {least:g})")
    width = max(len(n) for n in list(ref) + list(got))
    floor = GRAD_FLOOR * max((float(np.max(np.abs(r))) for r in ref.values() if r.size), default=0.0)
    for name, r in ref.items():
        g = got.get(name)
        if g is None or g.shape != r.shape:
            print(f"  FAIL {name:<{width}}  missing from {got_path}, or of another shape")
            ok = False
            continue
        r64, g64 = r.astype(np.float64).ravel(), g.astype(np.float64).ravel()
        if float(np.max(np.abs(r64))) < floor:
            small = float(np.max(np.abs(g64))) < 10 * floor
            ok &= small
            print(f"  {'OK  ' if small else 'FAIL'} {name:<{width}}  zero in torch (noise); "
                  f"max|mtc| {float(np.max(np.abs(g64))):.3e}")
            continue
        cos = float(r64 @ g64 / (np.linalg.norm(r64) * np.linalg.norm(g64) + 1e-300))
        worst = min(worst, cos)
        good = cos >= least
        ok &= good
        print(f"  {'OK  ' if good else 'FAIL'} {name:<{width}}  {str(list(r.shape)):<14} cosine {cos:.6f}")
    print(f"gradients: {len(ref)} tensors, lowest cosine {worst:.6f}: {'ok' if ok else 'FAIL'}")
    return ok


def logged_losses(path):
    losses = []
    with open(path) as f:
        for line in f:
            m = re.match(r"step (\d+)(?:/\d+)? \| loss ([-+0-9.eEinfa]+) ", line)
            if m:
                losses.append(float(m.group(2)))
    return losses


def logged_norms(path):
    """The gradient norms `train` printed (`... | norm X |` in a step line)."""
    norms = []
    with open(path) as f:
        for line in f:
            m = re.match(r"step \d+(?:/\d+)? \|.*\| norm ([-+0-9.eEinfa]+)(?: \||$)", line.strip())
            if m:
                norms.append(float(m.group(1)))
    return norms


def compare_losses(got, ref, tol, title, names):
    """Prints got against ref step by step; True when every relative error is within tol."""
    ok, worst = True, 0.0
    print(f"{title}: |{names[0]} - {names[1]}| / |{names[1]}| per step (tolerance {tol:g})")
    for i, (g, r) in enumerate(zip(got, ref)):
        _, rel = rel_error(g, r)
        worst = max(worst, rel)
        ok &= rel <= tol
        print(f"  {'OK  ' if rel <= tol else 'FAIL'} step {i + 1:2d}  {names[0]} {g:.6f}  "
              f"{names[1]} {r:.6f}  rel {rel:.3e}")
    print(f"{title}: {len(ref)} steps, worst relative error {worst:.3e}: "
          f"{'ok' if ok else 'FAIL'}")
    return ok


def check_losses(ref_path, key, log_path, tol, steps=None):
    with open(ref_path) as f:
        ref = json.load(f)[key]
    ref = (ref if isinstance(ref, list) else [ref])[:steps]
    got = logged_losses(log_path)
    if len(got) < len(ref):
        print(f"FAIL {key}: {log_path} has {len(got)} losses, the reference {len(ref)}")
        return False
    return compare_losses(got, ref, tol, f"losses ({key})", ("mtc", "torch"))


def check_logs(ref_path, got_path, tol):
    ref, got = logged_losses(ref_path), logged_losses(got_path)
    if not ref or len(got) != len(ref):
        print(f"FAIL: {got_path} has {len(got)} losses, {ref_path} {len(ref)}")
        return False
    ok = compare_losses(got, ref, tol, "losses", ("got", "ref"))
    # the global gradient norms, where both print them (summed over every rank's part)
    ref_n, got_n = logged_norms(ref_path), logged_norms(got_path)
    if ref_n and len(got_n) != len(ref_n):
        print(f"FAIL: {got_path} has {len(got_n)} gradient norms, {ref_path} {len(ref_n)}")
        return False
    if ref_n:
        ok &= compare_losses(got_n, ref_n, max(10 * tol, 1e-4), "gradient norms", ("got", "ref"))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grads")
    g.add_argument("ref")
    g.add_argument("got")
    g.add_argument("--tol", type=float, default=1e-4)
    g.add_argument("--floor", type=float, default=GRAD_FLOOR)
    l = sub.add_parser("losses")
    l.add_argument("ref")
    l.add_argument("key")
    l.add_argument("log")
    l.add_argument("--tol", type=float, default=1e-4)
    l.add_argument("--steps", type=int, default=None)
    t = sub.add_parser("tensors")   # ref's tensors in got (saved weights): the same check
    t.add_argument("ref")
    t.add_argument("got")
    t.add_argument("--tol", type=float, default=1e-4)
    c = sub.add_parser("cosine")
    c.add_argument("ref")
    c.add_argument("got")
    c.add_argument("--min", type=float, default=0.999)
    o = sub.add_parser("logs")
    o.add_argument("ref")
    o.add_argument("got")
    o.add_argument("--tol", type=float, default=1e-5)
    a = ap.parse_args()
    if a.cmd == "grads":
        ok = check_grads(a.ref, a.got, a.tol, floor_share=a.floor)
    elif a.cmd == "tensors":
        ok = check_grads(a.ref, a.got, a.tol, "tensors")
    elif a.cmd == "cosine":
        ok = check_cosine(a.ref, a.got, a.min)
    elif a.cmd == "logs":
        ok = check_logs(a.ref, a.got, a.tol)
    else:
        ok = check_losses(a.ref, a.key, a.log, a.tol, a.steps)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
