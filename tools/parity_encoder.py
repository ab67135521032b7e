#!/usr/bin/python3
"""A model built from torch.nn.TransformerEncoderLayer with an MSE loss,
exported to ONNX, and the reference numbers mtc's CPU program must reproduce
(tests/parity.sh).

    tools/parity_encoder.py             # tests/fixtures/parity/encoder
    tools/parity_encoder.py --out DIR

The model: x [B, T, DIN] -> Linear -> TransformerEncoderLayer (batch_first,
post-norm, GELU, dropout 0) -> Linear -> [B, T, DOUT]; the loss is the mean
squared error against y, written out as mean((out - y)^2) since torch 1.13
cannot export F.mse_loss.

encoder/  model_o17.onnx, model_o14.onnx: (x, y) -> loss; batch, gradients
          (by parameter name: layer.self_attn.in_proj_weight, ...) and losses

Run with Debian's python3-torch: /usr/bin/python3.
"""
import argparse
import os
import sys

import torch
import torch.nn as nn

import parity_lib as pl

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "tests", "fixtures", "parity")

B, T, DIN, D, NH, FF, DOUT = 4, 8, 16, 32, 4, 64, 8
OPTS = {"adamw": dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01),
        "sgd": dict(lr=0.1, weight_decay=0.0)}


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(DIN, D)
        self.layer = nn.TransformerEncoderLayer(D, NH, FF, dropout=0.0, activation="gelu", batch_first=True)
        self.head = nn.Linear(D, DOUT)

    def forward(self, x, y):
        return ((self.head(self.layer(self.inp(x))) - y) ** 2).mean()


def loss_fn(model, batch):
    return model(batch["x"], batch["y"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=FIXTURES, help="where the fixture folders go")
    ap.add_argument("--bf16-only", action="store_true",
                    help="only the bf16 references (ref_bf16.json, grads_bf16.safetensors)")
    a = ap.parse_args()
    torch.manual_seed(1337)
    model = Encoder()
    pl.perturb_norms(model, 1)
    model.eval()
    batch = {"x": pl.randn((B, T, DIN), 1), "y": pl.randn((B, T, DOUT), 2)}
    out = os.path.join(a.out, "encoder")
    ref16, grads16 = pl.reference_bf16(model, loss_fn, batch, OPTS)
    pl.write_bf16(out, ref16, grads16)
    if a.bf16_only:
        return 0
    ref, grads = pl.reference(model, loss_fn, batch, OPTS)
    note = pl.float64_drift(model, loss_fn, batch, grads)
    os.makedirs(out, exist_ok=True)
    dynamic = {"x": {0: "B", 1: "T"}, "y": {0: "B", 1: "T"}}
    for opset in (17, 14):
        pl.export_onnx(model, batch, os.path.join(out, f"model_o{opset}.onnx"), opset, dynamic)
    pl.write_fixture(out, batch, ref, grads, OPTS, f"-D B={B} -D T={T}", note=note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
