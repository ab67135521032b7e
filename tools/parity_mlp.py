#!/usr/bin/python3
"""An MLP classifier in PyTorch, exported to ONNX, and the reference numbers
mtc's CPU program must reproduce (tests/parity.sh).

    tools/parity_mlp.py                 # tests/fixtures/parity/mlp and mlp_dsl
    tools/parity_mlp.py --out DIR

The model: Linear -> ReLU -> LayerNorm -> Linear -> GELU -> Linear, logits over
K classes.

mlp/      model_o17.onnx, model_o14.onnx: the logits only (erf GELU); mtc adds
          the cross-entropy loss (mtc compile --loss cross-entropy --labels)
mlp_dsl/  the same with tanh GELU (the DSL's gelu) and the loss in the model,
          for mlp.mtc (in that folder); weights and gradients by DSL name

Run with Debian's python3-torch: /usr/bin/python3.
"""
import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import parity_lib as pl
from parity_check import st_write

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "tests", "fixtures", "parity")

B, D, H, K = 16, 24, 32, 10
LABELS = "labels"  # the input mtc's --labels adds for the targets
OPTS = {"adamw": dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01),
        "sgd": dict(lr=0.2, weight_decay=0.0)}

DSL_MODEL = f"""\
# mlp.mtc: tools/parity_mlp.py's MLP classifier in the DSL (written by that script).
model mlp;
dim B = {B}, D = {D}, H = {H}, K = {K};
input x: [B, D];
input y: i32[B] classes(K);
param fc1_w: [D, H] = normal(0.02);
param fc1_b: [H] = zeros;
param ln_w: [H] = ones;
param ln_b: [H] = zeros;
param fc2_w: [H, H] = normal(0.02);
param fc2_b: [H] = zeros;
param fc3_w: [H, K] = normal(0.02);
param fc3_b: [K] = zeros;
let h = layernorm(relu(x @ fc1_w + fc1_b), ln_w, ln_b);
let h = gelu(h @ fc2_w + fc2_b);
loss cross_entropy(h @ fc3_w + fc3_b, y);
"""


class MLP(nn.Module):
    def __init__(self, gelu):
        super().__init__()
        self.fc1 = nn.Linear(D, H)
        self.ln = nn.LayerNorm(H)
        self.fc2 = nn.Linear(H, H)
        self.gelu = nn.GELU(approximate=gelu)
        self.fc3 = nn.Linear(H, K)

    def forward(self, x):
        return self.fc3(self.gelu(self.fc2(self.ln(F.relu(self.fc1(x))))))


def make(gelu):
    torch.manual_seed(1337)
    model = MLP(gelu)
    pl.perturb_norms(model, 1)
    model.eval()
    batch = {"x": pl.randn((B, D), 1), "y": pl.tokens((B,), K, 2)}
    return model, batch


def loss_fn(model, batch):
    return F.cross_entropy(model(batch["x"]), batch["y"])


def to_dsl(tensors):
    out = {}
    for name, a in tensors.items():  # fc1.weight -> fc1_w (transposed), ln.bias -> ln_b
        layer, kind = name.split(".")
        out[f"{layer}_{kind[0]}"] = (a.T if kind == "weight" and layer != "ln" else a).copy()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=FIXTURES, help="where the fixture folders go")
    a = ap.parse_args()

    # ONNX: the logits; mtc adds the loss over them, with the labels as an input
    model, batch = make("none")
    ref, grads = pl.reference(model, loss_fn, batch, OPTS)
    note = pl.float64_drift(model, loss_fn, batch, grads)
    out = os.path.join(a.out, "mlp")
    os.makedirs(out, exist_ok=True)
    for opset in (17, 14):
        pl.export_onnx(model, {"x": batch["x"]}, os.path.join(out, f"model_o{opset}.onnx"), opset,
                       {"x": {0: "B"}}, output="logits")
    onnx_batch = {"x": batch["x"], LABELS: batch["y"]}
    pl.write_fixture(out, onnx_batch, ref, grads, OPTS, f"-D B={B} --loss cross-entropy --labels logits",
                     note=note)

    # the DSL: tanh GELU, int32 labels, DSL names
    model, batch = make("tanh")
    ref, grads = pl.reference(model, loss_fn, batch, OPTS)
    note = pl.float64_drift(model, loss_fn, batch, grads)
    out = os.path.join(a.out, "mlp_dsl")
    weights = {n: p.detach().numpy() for n, p in model.named_parameters()}
    dsl_batch = {"x": batch["x"], "y": batch["y"].to(torch.int32)}
    pl.write_fixture(out, dsl_batch, ref, to_dsl(grads), OPTS, "", load="weights.safetensors", note=note)
    st_write(os.path.join(out, "weights.safetensors"), to_dsl(weights), {"content": "initial weights"})
    with open(os.path.join(out, "mlp.mtc"), "w") as f:
        f.write(DSL_MODEL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
