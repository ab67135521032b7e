#!/usr/bin/python3
"""GPT-2 in PyTorch (nanoGPT), exported to ONNX, and the reference numbers
mtc's CPU program must reproduce (tests/parity.sh).

    tools/parity_gpt2.py                    # tests/fixtures/parity/gpt2 and gpt2_dsl
    tools/parity_gpt2.py --out DIR          # the same fixtures under DIR
    tools/parity_gpt2.py --124M --out DIR   # GPT-2 124M at B=4 T=64 (2 GB; not committed)

gpt2/      model_o17.onnx and model_o14.onnx: torch.onnx.export of GPT(idx,
           targets) -> loss, initializers named as the parameters
           (transformer.wte.weight, transformer.h.0.attn.c_attn.weight, ...);
           batch, gradients (by those names) and losses (see parity_lib.py)
gpt2_dsl/  the same model and batch for examples/gpt2.mtc: the initial weights
           and the gradients under the DSL's names, Linear weights transposed
           (the DSL computes x @ W, PyTorch x @ W.T), wpe cut to T rows

With --124M the folders are gpt2_124M (model_o17.onnx only) and gpt2_124M_dsl
(examples/gpt2.mtc with -D L=12 -D C=768 -D NH=12 -D V=50257 -D T=64).

Run with Debian's python3-torch: /usr/bin/python3.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import parity_lib as pl
from parity_check import st_write

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "tests", "fixtures", "parity")

SMALL = dict(vocab=128, block=16, n_embd=32, n_head=4, n_layer=2, batch=4, seq=16)
GPT2_124M = dict(vocab=50257, block=1024, n_embd=768, n_head=12, n_layer=12, batch=4, seq=64)
OPTS = {"adamw": dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1),
        "sgd": dict(lr=0.1, weight_decay=0.01)}

# ---- the model (nanoGPT's, dropout 0) ----------------------------------------------------


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c = cfg["n_embd"]
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)
        self.n_head, self.n_embd = cfg["n_head"], c
        self.flash = hasattr(F, "scaled_dot_product_attention")  # torch >= 2.0
        if not self.flash:
            b = cfg["block"]
            self.register_buffer("bias", torch.tril(torch.ones(b, b)).view(1, 1, b, b))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c = cfg["n_embd"]
        self.c_fc = nn.Linear(c, 4 * c)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg["n_embd"])
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg["n_embd"])
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg["vocab"], cfg["n_embd"]),
            wpe=nn.Embedding(cfg["block"], cfg["n_embd"]),
            h=nn.ModuleList([Block(cfg) for _ in range(cfg["n_layer"])]),
            ln_f=nn.LayerNorm(cfg["n_embd"]),
        ))
        self.lm_head = nn.Linear(cfg["n_embd"], cfg["vocab"], bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2's scaled residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * cfg["n_layer"]))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def loss_fn(model, batch):
    return model(batch["idx"], batch["targets"])


# ---- examples/gpt2.mtc's names -----------------------------------------------------------

DSL_BLOCK = {  # DSL name in block h.N: (PyTorch name in transformer.h.N, transposed)
    "ln1_w": ("ln_1.weight", False), "ln1_b": ("ln_1.bias", False),
    "qkv_w": ("attn.c_attn.weight", True), "qkv_b": ("attn.c_attn.bias", False),
    "attproj_w": ("attn.c_proj.weight", True), "attproj_b": ("attn.c_proj.bias", False),
    "ln2_w": ("ln_2.weight", False), "ln2_b": ("ln_2.bias", False),
    "fc_w": ("mlp.c_fc.weight", True), "fc_b": ("mlp.c_fc.bias", False),
    "fcproj_w": ("mlp.c_proj.weight", True), "fcproj_b": ("mlp.c_proj.bias", False),
}


def dsl_names(cfg):
    """{DSL name: (PyTorch name, transposed)} for examples/gpt2.mtc."""
    names = {"wte": ("transformer.wte.weight", False), "wpe": ("transformer.wpe.weight", False),
             "lnf_w": ("transformer.ln_f.weight", False), "lnf_b": ("transformer.ln_f.bias", False)}
    for i in range(cfg["n_layer"]):
        for dsl, (pt, tr) in DSL_BLOCK.items():
            names[f"h.{i}.{dsl}"] = (f"transformer.h.{i}.{pt}", tr)
    return names


def to_dsl(tensors, cfg):
    """The tensors under DSL names; wpe cut to the T rows the DSL model has."""
    out = {dsl: (tensors[pt].T if tr else tensors[pt]).copy() for dsl, (pt, tr) in dsl_names(cfg).items()}
    out["wpe"] = out["wpe"][:cfg["seq"]].copy()
    return out


def dsl_dims(cfg):
    return (f"-D B={cfg['batch']} -D T={cfg['seq']} -D C={cfg['n_embd']} -D L={cfg['n_layer']} "
            f"-D NH={cfg['n_head']} -D V={cfg['vocab']}")


# ---- fixtures ------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=FIXTURES, help="where the fixture folders go")
    ap.add_argument("--124M", dest="big", action="store_true", help="GPT-2 124M")
    ap.add_argument("--bf16-only", action="store_true",
                    help="only the bf16 references (ref_bf16.json, grads_bf16.safetensors)")
    a = ap.parse_args()
    cfg = GPT2_124M if a.big else SMALL
    torch.manual_seed(1337)
    model = GPT(cfg)
    pl.perturb_norms(model, 1)
    model.eval()
    B, T, V = cfg["batch"], cfg["seq"], cfg["vocab"]
    batch = {"idx": pl.tokens((B, T), V, 1), "targets": pl.tokens((B, T), V, 2)}
    name = "gpt2_124M" if a.big else "gpt2"
    ref16, grads16 = pl.reference_bf16(model, loss_fn, batch, OPTS)
    pl.write_bf16(os.path.join(a.out, name), ref16, grads16)
    pl.write_bf16(os.path.join(a.out, name + "_dsl"), ref16, to_dsl(grads16, cfg))
    if a.bf16_only:
        return 0
    ref, grads = pl.reference(model, loss_fn, batch, OPTS)
    note = pl.float64_drift(model, loss_fn, batch, grads)
    print(note)

    out = os.path.join(a.out, name)
    os.makedirs(out, exist_ok=True)
    dynamic = {"idx": {0: "B", 1: "T"}, "targets": {0: "B", 1: "T"}}
    for opset in (17,) if a.big else (17, 14):
        pl.export_onnx(model, batch, os.path.join(out, f"model_o{opset}.onnx"), opset, dynamic)
    pl.write_fixture(out, batch, ref, grads, OPTS, f"-D B={B} -D T={T}", note=note)

    # the same for the DSL: int32 tokens, DSL names, x @ W layouts
    out = os.path.join(a.out, name + "_dsl")
    weights = {n: p.detach().numpy() for n, p in model.named_parameters()}
    dsl_batch = {k: v.to(torch.int32) for k, v in batch.items()}
    pl.write_fixture(out, dsl_batch, ref, to_dsl(grads, cfg), OPTS, dsl_dims(cfg), load="weights.safetensors",
                     note=note)
    st_write(os.path.join(out, "weights.safetensors"), to_dsl(weights, cfg), {"content": "initial weights"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
