#!/usr/bin/python3
"""Export small PyTorch models to ONNX as test fixtures for mtc's ONNX frontend.

Run with Debian's python3-torch (/usr/bin/python3; torch 1.13, onnx 1.12):

    tools/onnx_models.py                      # writes tests/onnx/*.onnx and *.ref
    tools/onnx_models.py --out DIR NAME...    # only some fixtures, elsewhere
    tools/onnx_models.py --gpt2-124M FILE     # GPT-2 124M (500 MB; not committed)
    tools/onnx_models.py --list

Each fixture NAME.onnx comes with NAME.ref, a small text file the C tests read:

    # comment
    dim B 2                      # a -D binding the model needs
    option --loss cross-entropy  # mtc options the model needs (when it has no loss)
    input idx i32 16 3 1 4 ...   # the fixed input: name, dtype, count, values
    loss 4.1589                  # PyTorch's loss on that input with the exported weights
    fused layernorm 2            # the fused ops mtc's fusion pass must produce

Models: a nanoGPT-style GPT-2 (tanh-GELU, causal mask buffer, tied LM head),
torch.nn.TransformerEncoderLayer and torch.nn.MultiheadAttention models with
an MSE loss, MLPs with LayerNorm/ReLU/GELU and cross-entropy, log-softmax +
NLL, softmax + log + NLL and MSE losses, small CNNs (Conv2d, grouped and depthwise); exported at opsets 14 and 17, in eval
mode and with training=TrainingMode.TRAINING. The script also writes a few
broken files (bad_*.onnx) for the frontend's error tests.
"""
import argparse
import io
import math
import os
import sys

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

from parity_lib import randn, tokens

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "tests", "onnx")

# ---- models ------------------------------------------------------------------------------


def mse(a, b):
    """F.mse_loss as torch 1.13 exports it: aten::mse_loss has no ONNX symbolic there."""
    return ((a - b) ** 2).mean()


class NewGELU(nn.Module):
    """The tanh approximation of GELU, written out as nanoGPT does."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class CausalSelfAttention(nn.Module):
    def __init__(self, c, nh, block, dropout):
        super().__init__()
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.n_head, self.n_embd = nh, c
        self.register_buffer("bias", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):
    def __init__(self, c, nh, block, dropout, gelu):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c)
        self.attn = CausalSelfAttention(c, nh, block, dropout)
        self.ln_2 = nn.LayerNorm(c)
        self.c_fc = nn.Linear(c, 4 * c)
        self.act = NewGELU() if gelu == "tanh" else nn.GELU()
        self.c_proj = nn.Linear(4 * c, c)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.drop(self.c_proj(self.act(self.c_fc(self.ln_2(x)))))


class GPT(nn.Module):
    """nanoGPT: token + position embeddings, L blocks, final LayerNorm, tied LM head."""

    def __init__(self, vocab=64, block=16, c=32, nh=2, layers=2, dropout=0.0, gelu="tanh", with_loss=True):
        super().__init__()
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(block, c)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList([Block(c, nh, block, dropout, gelu) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(c)
        self.lm_head = nn.Linear(c, vocab, bias=False)
        self.wte.weight = self.lm_head.weight  # tied
        self.with_loss = with_loss
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device).unsqueeze(0)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for blk in self.h:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        if not self.with_loss:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


class Encoder(nn.Module):
    """torch.nn.TransformerEncoderLayer (batch_first) + a linear head + MSE loss."""

    def __init__(self, d=32, nh=4, ff=64, dropout=0.0, activation="gelu", norm_first=False):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d, nh, ff, dropout, activation=activation,
                                                batch_first=True, norm_first=norm_first)
        self.head = nn.Linear(d, d)

    def forward(self, x, y):
        return mse(self.head(self.layer(x)), y)


class MHA(nn.Module):
    """torch.nn.MultiheadAttention with a causal mask, a LayerNorm MLP, a classifier."""

    def __init__(self, d=32, nh=4, classes=10, dropout=0.0, seq=8):
        super().__init__()
        self.mha = nn.MultiheadAttention(d, nh, dropout=dropout, batch_first=True)
        self.ln = nn.LayerNorm(d)
        self.fc = nn.Linear(d, classes)
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1))

    def forward(self, x, y):
        a, _ = self.mha(x, x, x, attn_mask=self.mask, need_weights=False)
        logits = self.fc(self.ln(x + a)).mean(dim=1)
        return F.cross_entropy(logits, y)


class MLP(nn.Module):
    """Linear -> LayerNorm -> activation -> Linear, with one of several losses."""

    def __init__(self, d=16, h=32, k=10, act="relu", loss="ce", dropout=0.0):
        super().__init__()
        self.fc1 = nn.Linear(d, h)
        self.ln = nn.LayerNorm(h)
        self.act = {"relu": nn.ReLU(), "gelu": nn.GELU(), "gelu_tanh": nn.GELU(approximate="tanh")}[act]
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(h, k)
        self.loss = loss

    def forward(self, x, y=None):
        z = self.fc2(self.drop(self.act(self.ln(self.fc1(x)))))
        if self.loss == "ce":
            return F.cross_entropy(z, y)
        if self.loss == "nll":
            return F.nll_loss(F.log_softmax(z, dim=-1), y)
        if self.loss == "softmax_nll":
            return F.nll_loss(torch.log(F.softmax(z, dim=-1)), y)
        if self.loss == "mse":
            return mse(z, y)
        if self.loss == "logsoftmax":
            return F.log_softmax(z, dim=-1)  # no loss: mtc adds one (--loss) over log-probabilities
        return z  # no loss: mtc adds one (--loss)


class CNN(nn.Module):
    """Two convolutions (strided and padded with a bias; dilated, padded unevenly by height and
    width, without one), ReLU, flatten, a classifier and cross-entropy."""

    def __init__(self, k=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(8, 4, (3, 2), padding=(2, 1), dilation=2, bias=False)
        self.fc = nn.Linear(4 * 5 * 5, k)

    def forward(self, x, y):
        h = F.relu(self.conv2(F.relu(self.conv1(x))))
        return F.cross_entropy(self.fc(torch.flatten(h, 1)), y)


class CNN1D(nn.Module):
    """Whisper's front end in small: two 1-D convolutions (padded with a bias; strided,
    dilated and padded unevenly, without one), GELU, flatten, a classifier and cross-entropy."""

    def __init__(self, k=10):
        super().__init__()
        self.conv1 = nn.Conv1d(4, 6, 3, padding=1)
        self.conv2 = nn.Conv1d(6, 5, 3, stride=2, padding=2, dilation=2, bias=False)
        self.fc = nn.Linear(5 * 6, k)

    def forward(self, x, y):
        h = F.gelu(self.conv2(F.gelu(self.conv1(x))))
        return F.cross_entropy(self.fc(torch.flatten(h, 1)), y)


class GroupedCNN(nn.Module):
    """ConvNeXt's and ResNeXt's convolutions in small: a strided stem, a depthwise 3x3 (a group
    per channel, with a bias), a grouped 3x3 (2 groups, without one), GELU, a global average
    pool, a classifier and cross-entropy."""

    def __init__(self, k=10):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 2, stride=2)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.grouped = nn.Conv2d(8, 6, 3, padding=(1, 2), dilation=(1, 2), groups=2, bias=False)
        self.fc = nn.Linear(6, k)

    def forward(self, x, y):
        h = F.gelu(self.grouped(F.gelu(self.dw(self.stem(x)))))
        return F.cross_entropy(self.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1)), y)


class PooledCNN(nn.Module):
    """Pooling as CNNs write it: ResNet's stem max pool (3x3, stride 2, padded), an average
    pool of 2x2 (stride 2: AvgPool2d's default counts the padding, here none), and a padded
    3x3 average pool of stride 1 that does not count the padding (DenseNet's and Inception's
    count_include_pad=False), a classifier and cross-entropy."""

    def __init__(self, k=10):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.fc = nn.Linear(6 * 3 * 3, k)

    def forward(self, x, y):
        h = F.max_pool2d(F.relu(self.conv(x)), 3, stride=2, padding=1)
        h = F.avg_pool2d(F.avg_pool2d(h, 3, stride=1, padding=1, count_include_pad=False), 2)
        return F.cross_entropy(self.fc(torch.flatten(h, 1)), y)


# ---- fixtures ----------------------------------------------------------------------------

B, T, D = 2, 8, 16
EVAL, TRAIN = torch.onnx.TrainingMode.EVAL, torch.onnx.TrainingMode.TRAINING


def gpt_case(opset, mode, dropout=0.0, gelu="tanh", with_loss=True):
    torch.manual_seed(1)
    m = GPT(dropout=dropout, gelu=gelu, with_loss=with_loss)
    idx, tgt = tokens((B, T), 64, 2), tokens((B, T), 64, 3)
    attn_dropout = mode == TRAIN and dropout > 0  # softmax -> dropout -> @ v stays unfused
    if with_loss:
        return dict(model=m, inputs={"idx": idx, "targets": tgt}, opset=opset, mode=mode,
                    dynamic={"idx": {0: "B", 1: "T"}, "targets": {0: "B", 1: "T"}},
                    dims={"B": B, "T": T}, outputs=["loss"],
                    fused={"layernorm": 5, "attention": 0 if attn_dropout else 2,
                           "gelu" if gelu == "tanh" else "gelu_erf": 2, "cross_entropy": 1})
    return dict(model=m, inputs={"idx": idx}, opset=opset, mode=mode, dynamic={"idx": {0: "B", 1: "T"}},
                dims={"B": B, "T": T}, outputs=["logits"], options=["--loss", "cross-entropy", "--labels", "logits"],
                labels=tgt, fused={"layernorm": 5, "attention": 2, "gelu": 2, "cross_entropy": 1})


def encoder_case(opset, mode, dropout=0.0, activation="gelu", norm_first=False):
    torch.manual_seed(4)
    m = Encoder(dropout=dropout, activation=activation, norm_first=norm_first)
    fused = {"layernorm": 2, "attention": 0 if mode == TRAIN and dropout > 0 else 1}
    if activation == "gelu":
        fused["gelu_erf"] = 1
    return dict(model=m, inputs={"x": randn((B, T, 32), 5), "y": randn((B, T, 32), 6)}, opset=opset, mode=mode,
                dynamic={"x": {0: "B", 1: "T"}, "y": {0: "B", 1: "T"}}, dims={"B": B, "T": T},
                outputs=["loss"], fused=fused)


def mha_case(opset, mode):
    torch.manual_seed(7)
    m = MHA(seq=T)
    return dict(model=m, inputs={"x": randn((B, T, 32), 8), "y": tokens((B,), 10, 9)}, opset=opset, mode=mode,
                dynamic={"x": {0: "B"}, "y": {0: "B"}}, dims={"B": B}, outputs=["loss"],
                fused={"layernorm": 1, "attention": 1, "cross_entropy": 1})


def mlp_case(opset, mode, act="relu", loss="ce", dropout=0.0):
    torch.manual_seed(10)
    m = MLP(act=act, loss=loss, dropout=dropout)
    x = randn((B * 4, D), 11)
    fused = {"layernorm": 1}
    if act == "gelu":
        fused["gelu_erf"] = 1
    if act == "gelu_tanh":
        fused["gelu"] = 1
    if loss == "mse":
        return dict(model=m, inputs={"x": x, "y": randn((B * 4, 10), 12)}, opset=opset, mode=mode,
                    dynamic={"x": {0: "N"}, "y": {0: "N"}}, dims={"N": B * 4}, outputs=["loss"], fused=fused)
    y = tokens((B * 4,), 10, 12)
    if loss in ("none", "logsoftmax"):
        fused["cross_entropy"] = 1
        out = "logits" if loss == "none" else "logp"
        return dict(model=m, inputs={"x": x}, opset=opset, mode=mode, dynamic={"x": {0: "N"}},
                    dims={"N": B * 4}, outputs=[out], options=["--loss", "cross-entropy", "--labels", out],
                    labels=y, fused=fused)
    fused["cross_entropy"] = 1
    return dict(model=m, inputs={"x": x, "y": y}, opset=opset, mode=mode, dynamic={"x": {0: "N"}, "y": {0: "N"}},
                dims={"N": B * 4}, outputs=["loss"], fused=fused)


def cnn_case(opset, mode):
    torch.manual_seed(13)
    return dict(model=CNN(), inputs={"x": randn((B, 3, 9, 10), 14), "y": tokens((B,), 10, 15)}, opset=opset,
                mode=mode, dynamic={"x": {0: "B"}, "y": {0: "B"}}, dims={"B": B}, outputs=["loss"],
                fused={"cross_entropy": 1})


def cnn1d_case(opset, mode):
    torch.manual_seed(17)
    return dict(model=CNN1D(), inputs={"x": randn((B, 4, 12), 18), "y": tokens((B,), 10, 19)}, opset=opset,
                mode=mode, dynamic={"x": {0: "B"}, "y": {0: "B"}}, dims={"B": B}, outputs=["loss"],
                fused={"cross_entropy": 1})


def cnn_pool_case(opset, mode):
    torch.manual_seed(23)
    return dict(model=PooledCNN(), inputs={"x": randn((B, 3, 11, 12), 24), "y": tokens((B,), 10, 25)},
                opset=opset, mode=mode, dynamic={"x": {0: "B"}, "y": {0: "B"}}, dims={"B": B},
                outputs=["loss"], fused={"cross_entropy": 1, "maxpool2d": 1})


def cnn_grouped_case(opset, mode):
    torch.manual_seed(19)
    return dict(model=GroupedCNN(), inputs={"x": randn((B, 3, 8, 10), 20), "y": tokens((B,), 10, 21)},
                opset=opset, mode=mode, dynamic={"x": {0: "B"}, "y": {0: "B"}}, dims={"B": B},
                outputs=["loss"], fused={"cross_entropy": 1})


CASES = {
    "gpt_o13_eval": lambda: gpt_case(13, EVAL),
    "gpt_o14_eval": lambda: gpt_case(14, EVAL),
    "gpt_o17_eval": lambda: gpt_case(17, EVAL),
    "gpt_o14_train": lambda: gpt_case(14, TRAIN, dropout=0.1),
    "gpt_o17_train": lambda: gpt_case(17, TRAIN, dropout=0.1),
    "gpt_o17_train_p0": lambda: gpt_case(17, TRAIN, dropout=0.0),
    "gpt_erf_o17_eval": lambda: gpt_case(17, EVAL, gelu="erf"),
    "gpt_logits_o17_eval": lambda: gpt_case(17, EVAL, with_loss=False),
    "encoder_o14_eval": lambda: encoder_case(14, EVAL),
    "encoder_o17_eval": lambda: encoder_case(17, EVAL),
    "encoder_o17_train": lambda: encoder_case(17, TRAIN, dropout=0.1),
    "encoder_relu_prenorm_o17_eval": lambda: encoder_case(17, EVAL, activation="relu", norm_first=True),
    "mha_o14_eval": lambda: mha_case(14, EVAL),
    "mha_o17_train": lambda: mha_case(17, TRAIN),
    "mlp_ce_o14_eval": lambda: mlp_case(14, EVAL, "relu", "ce"),
    "mlp_ce_o17_train": lambda: mlp_case(17, TRAIN, "gelu", "ce", dropout=0.2),
    "mlp_nll_o17_eval": lambda: mlp_case(17, EVAL, "gelu", "nll"),
    "mlp_softmax_nll_o14_eval": lambda: mlp_case(14, EVAL, "gelu_tanh", "softmax_nll"),
    "mlp_mse_o17_eval": lambda: mlp_case(17, EVAL, "relu", "mse"),
    "mlp_mse_o14_train": lambda: mlp_case(14, TRAIN, "gelu", "mse"),
    "mlp_logits_o17_eval": lambda: mlp_case(17, EVAL, "relu", "none"),
    "mlp_logsoftmax_o17_eval": lambda: mlp_case(17, EVAL, "gelu", "logsoftmax"),
    "cnn_o14_eval": lambda: cnn_case(14, EVAL),
    "cnn_o17_train": lambda: cnn_case(17, TRAIN),
    "cnn1d_o17_eval": lambda: cnn1d_case(17, EVAL),
    "cnn_grouped_o17_eval": lambda: cnn_grouped_case(17, EVAL),
    "cnn_pool_o17_eval": lambda: cnn_pool_case(17, EVAL),
}


def export(case, path):
    m = case["model"]
    names = list(case["inputs"])
    args = tuple(case["inputs"][n] for n in names)
    kw = {}
    if case["mode"] == TRAIN:
        kw["do_constant_folding"] = False
        m.train()
    else:
        m.eval()
    torch.onnx.export(m, args, path, input_names=names, output_names=case["outputs"], opset_version=case["opset"],
                      dynamic_axes=case["dynamic"], training=case["mode"], **kw)


def reference_loss(case):
    """The loss mtc must reproduce: eval-mode semantics unless dropout is off anyway."""
    m = case["model"]
    m.eval()
    with torch.no_grad():
        out = m(*case["inputs"].values())
        if "labels" in case:
            out = F.cross_entropy(out.reshape(-1, out.shape[-1]), case["labels"].reshape(-1))
    return float(out)


def has_dropout(case):
    return any(isinstance(x, nn.Dropout) and x.p > 0 for x in case["model"].modules())


def write_ref(case, path, name):
    with open(path, "w") as f:
        f.write(f"# {name}: written by tools/onnx_models.py\n")
        for k, v in case["dims"].items():
            f.write(f"dim {k} {v}\n")
        for o in case.get("options", []):
            f.write(f"option {o}\n")
        items = list(case["inputs"].items())
        if "labels" in case:
            items.append(("labels", case["labels"]))
        for k, t in items:
            flat = t.reshape(-1)
            if t.dtype == torch.long:
                vals = " ".join(str(int(x)) for x in flat)
                f.write(f"input {k} i32 {flat.numel()} {vals}\n")
            else:
                vals = " ".join(repr(float(x)) for x in flat)
                f.write(f"input {k} f32 {flat.numel()} {vals}\n")
        if not has_dropout(case) or case["mode"] == EVAL:
            f.write(f"loss {reference_loss(case)!r}\n")
        for op, count in case.get("fused", {}).items():
            f.write(f"fused {op} {count}\n")


# ---- broken files for the error tests ---------------------------------------------------------


def write_numpy_ref(out, name, n, x, loss):
    """OUT/NAME.ref of a hand-made model: its dim N, its float input x and the loss numpy
    computed."""
    with open(os.path.join(out, name + ".ref"), "w") as fh:
        fh.write(f"# {name}: written by tools/onnx_models.py (reference: numpy)\n")
        fh.write(f"dim N {n}\n")
        fh.write(f"input x f32 {x.size} " + " ".join(repr(float(v)) for v in x.flatten()) + "\n")
        fh.write(f"loss {float(loss)!r}\n")


def tiny_graph(nodes, inits=(), inputs=None, outputs=None, opset=17):
    inputs = inputs or [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])]
    outputs = outputs or [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])]
    g = helper.make_graph(nodes, "bad", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def short_tensor():
    """A float [4, 3] initializer with only 20 bytes of raw data."""
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4, 3])
    t.raw_data = b"\0" * 20
    return t


def write_bad(out):
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    mm = helper.make_node("MatMul", ["x", "w"], ["h"], name="mm")
    red = helper.make_node("ReduceSum", ["h"], ["y"], name="sum", keepdims=0)
    bad = {
        # an op mtc does not know
        "bad_unsupported_op": tiny_graph([mm, helper.make_node("Celu", ["h"], ["c"], name="my_celu"),
                                          helper.make_node("ReduceSum", ["c"], ["y"], name="sum", keepdims=0)], [w]),
        # a sequence op (torch writes them for repeat_interleave with dynamic axes)
        "bad_sequence_op": tiny_graph([mm, helper.make_node("SplitToSequence", ["h"], ["s"], name="split_seq"),
                                       helper.make_node("ConcatFromSequence", ["s"], ["c"], axis=0),
                                       helper.make_node("ReduceSum", ["c"], ["y"], name="sum", keepdims=0)], [w]),
        # a node reads a tensor nothing produces
        "bad_dangling": tiny_graph([helper.make_node("MatMul", ["x", "nowhere"], ["h"], name="mm"), red], [w]),
        # raw_data shorter than the dims say
        "bad_tensor_size": tiny_graph([mm, red], [short_tensor()]),
        # an opset older than 13
        "bad_opset": tiny_graph([mm, red], [w], opset=11),
        # external data that is not there
        "bad_external": None,
        # shapes that do not agree
        "bad_shapes": tiny_graph([mm, red], [numpy_helper.from_array(np.ones((5, 3), np.float32), "w")]),
    }
    bad.update(bad_conv())
    bad.update(bad_pool())
    bad.update(bad_pad_mod(mm, red, w))
    ext = tiny_graph([mm, red], [w])
    t = ext.graph.initializer[0]
    t.ClearField("raw_data")
    t.ClearField("float_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "missing.bin"), ("offset", "0"), ("length", "48")):
        e = t.external_data.add()
        e.key, e.value = k, v
    bad["bad_external"] = ext
    bad.update(hostile(mm, red, w))
    for name, model in bad.items():
        with open(os.path.join(out, name + ".onnx"), "wb") as f:
            f.write(model.SerializeToString())


def bad_pad_mod(mm, red, w):
    """Pad in a mode mtc does not run, Mod of a run-time tensor (mtc folds Mod only), Div of
    run-time integers (mtc adds, subtracts and multiplies them), x[mask] read by other than
    elementwise ops into a reduction of all of it, and a running sum along the batch."""
    pads = numpy_helper.from_array(np.array([0, 1, 0, 1], np.int64), "pads")
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 4])
    one = numpy_helper.from_array(np.array(1, np.int64), "k1")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    return {
        "bad_selection_softmax": tiny_graph([helper.make_node("Constant", [], ["one"], value=one),
                                             helper.make_node("Equal", ["ids", "one"], ["m"], name="equal"),
                                             helper.make_node("NonZero", ["m"], ["nz"], name="nonzero"),
                                             helper.make_node("Transpose", ["nz"], ["at"], name="transpose", perm=[1, 0]),
                                             helper.make_node("GatherND", ["x", "at"], ["sel"], name="gather"),
                                             helper.make_node("Softmax", ["sel"], ["p"], name="softmax", axis=0),
                                             helper.make_node("ReduceSum", ["p"], ["y"], name="sum", keepdims=0)],
                                            [], inputs=[x, ids]),
        # a running sum along the batch (refused under data parallelism: tests/CMakeLists.txt)
        "edge_cumsum_rows": tiny_graph([mm, helper.make_node("Constant", [], ["ax0"], value=numpy_helper.from_array(
                                            np.array(0, np.int64), "ax0_v")),
                                        helper.make_node("CumSum", ["h", "ax0"], ["c"], name="cumsum"),
                                        helper.make_node("ReduceMean", ["c"], ["y"], name="mean", keepdims=0)],
                                       [w]),
        "bad_int_div_runtime": tiny_graph([mm, helper.make_node("Div", ["ids", "ids"], ["q"], name="div"),
                                           helper.make_node("Cast", ["q"], ["qf"], to=TensorProto.FLOAT),
                                           helper.make_node("Mul", ["x", "qf"], ["xq"]),
                                           helper.make_node("ReduceSum", ["xq"], ["y"], name="sum", keepdims=0)],
                                          [w], inputs=[x, ids]),
        "bad_pad_mode": tiny_graph([mm, helper.make_node("Pad", ["h", "pads"], ["p"], name="pad", mode="reflect"),
                                    helper.make_node("ReduceSum", ["p"], ["y"], name="sum", keepdims=0)], [w, pads]),
        "bad_mod_runtime": tiny_graph([mm, helper.make_node("Mod", ["h", "two"], ["m"], name="mod", fmod=1),
                                       helper.make_node("ReduceSum", ["m"], ["y"], name="sum", keepdims=0)], [w, two]),
    }


def bad_conv():
    """Conv nodes mtc refuses: groups that do not divide the channels, and window attributes of
    the wrong length or range."""
    image = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8, 8])]
    w = numpy_helper.from_array(np.ones((6, 2, 3, 3), np.float32), "w")
    w1 = numpy_helper.from_array(np.ones((6, 4, 3, 3), np.float32), "w")

    def conv(weight, **attrs):
        return tiny_graph([helper.make_node("Conv", ["x", "w"], ["c"], name="conv", **attrs),
                           helper.make_node("ReduceSum", ["c"], ["y"], name="sum", keepdims=0)],
                          [weight], inputs=image)
    return {"bad_conv_group": conv(w, group=3), "bad_conv_pads": conv(w1, pads=[1, 1]),
            "bad_conv_strides": conv(w1, strides=[0, 1]), "bad_conv_kernel": conv(w1, kernel_shape=[3, 2]),
            "bad_conv_auto_pad": conv(w1, auto_pad="SAME_UPPER")}


def bad_pool():
    """MaxPool and BatchNormalization as mtc refuses them: rounding the pooled size up, dilation,
    padding that would fill a window, and a training-mode BatchNorm's running mean read."""
    image = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8, 8])]

    def pool(**attrs):
        return tiny_graph([helper.make_node("MaxPool", ["x"], ["p"], name="pool", **attrs),
                           helper.make_node("ReduceSum", ["p"], ["y"], name="sum", keepdims=0)],
                          [], inputs=image)
    stats = [numpy_helper.from_array(np.full(4, v, np.float32), n)
             for n, v in (("scale", 1), ("bias", 0), ("mean", 0), ("var", 1))]
    bn = tiny_graph([helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"],
                                      ["b", "rm", "rv"], name="bn", training_mode=1),
                     helper.make_node("ReduceSum", ["rm"], ["y"], name="sum", keepdims=0)],
                    stats, inputs=image)
    return {"bad_maxpool_ceil": pool(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
            "bad_maxpool_dilation": pool(kernel_shape=[2, 2], dilations=[2, 2]),
            "bad_maxpool_pads": pool(kernel_shape=[2, 2], pads=[2, 2, 2, 2]),
            "bad_batchnorm_running": bn}


def hostile(mm, red, w):
    """Values at the ends of int64 and tensors too large to keep at compile time: bad_* must fail
    with a message naming the node, edge_* must load."""
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, dtype=np.int64), name)
    f32 = lambda name, v: numpy_helper.from_array(np.array(v, dtype=np.float32), name)
    lo, hi = -2**63, 2**63 - 1

    def plus_sum(nodes, out, inits):
        """y = sum(x @ w) + sum(out): nodes compute out from the initializers."""
        tail = [helper.make_node("ReduceSum", [out], ["os"], name="osum", keepdims=0),
                helper.make_node("ReduceSum", ["h"], ["hs"], name="sum", keepdims=0),
                helper.make_node("Add", ["hs", "os"], ["y"], name="add")]
        return tiny_graph([mm] + nodes + tail, [w] + inits)

    def rng(start, limit):
        return plus_sum([helper.make_node("Range", ["s", "l", "d"], ["r"], name="range"),
                         helper.make_node("Cast", ["r"], ["rf"], name="cast", to=TensorProto.FLOAT)],
                        "rf", [i64("s", start), i64("l", limit), i64("d", 1)])

    def slice_(start, end, step):
        return tiny_graph([mm, helper.make_node("Slice", ["h", "st", "en", "ax", "sp"], ["s"], name="slice"),
                           helper.make_node("ReduceSum", ["s"], ["y"], name="sum", keepdims=0)],
                          [w, i64("st", [start]), i64("en", [end]), i64("ax", [1]), i64("sp", [step])])

    def trilu(k):
        return plus_sum([helper.make_node("Trilu", ["m", "k"], ["t"], name="trilu")], "t",
                        [f32("m", np.ones((3, 3))), i64("k", k)])

    def nested_ifs(depth):
        """If nodes whose then_branch holds an If node ... depth times: 3 messages per level."""
        g = helper.make_graph([], "leaf", [], [])
        for _ in range(depth):
            node = helper.make_node("If", ["c"], [], then_branch=g)
            g = helper.make_graph([node], "g", [], [])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    return {
        # deeper than the loader's limit on nested messages (protobuf-c recurses per level)
        "bad_nesting": nested_ifs(30),
        # a 2^28-element mask from a 16-byte shape (the folder must not build it)
        "bad_known_size": plus_sum([helper.make_node("Expand", ["one", "shp"], ["e"], name="expand"),
                                    helper.make_node("Trilu", ["e"], ["t"], name="trilu")],
                                   "t", [f32("one", 1), i64("shp", [16384, 16384])]),
        "bad_int64_min_shape": tiny_graph([mm, helper.make_node("Reshape", ["h", "shp"], ["r"], name="reshape"),
                                           helper.make_node("ReduceSum", ["r"], ["y"], name="sum", keepdims=0)],
                                          [w, i64("shp", [lo, 3])]),
        "bad_range_size": rng(lo, hi),
        # run-time integer work beyond T5's label shift: scattered elements, a float compared with
        # integers
        "bad_scatter_pattern": tiny_graph([mm, helper.make_node("ScatterND", ["h", "si", "su"], ["s"], name="scatter"),
                                           helper.make_node("ReduceSum", ["s"], ["y"], name="sum", keepdims=0)],
                                          [w, i64("si", [[0, 0], [1, 2]]), f32("su", [1, 2])]),
        "bad_compare_types": tiny_graph([mm, helper.make_node("Less", ["h", "ids"], ["e"], name="less"),
                                         helper.make_node("Cast", ["e"], ["ef"], to=TensorProto.FLOAT),
                                         helper.make_node("ReduceSum", ["ef"], ["y"], name="sum", keepdims=0)],
                                        [w], inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
                                                     helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 3])]),
        "edge_int64_min_unused": tiny_graph([mm, red], [w, i64("big", [lo])]),
        "edge_range_int64_min": rng(lo, lo + 3),
        "edge_slice_step_max": slice_(0, hi, hi),
        "edge_trilu_k_max": trilu(hi),
        "edge_trilu_k_min": trilu(lo),
    }


def write_external(out):
    """mlp_ext: the MLP classifier with every initializer in mlp_ext.onnx.data."""
    case = mlp_case(17, EVAL, "relu", "ce")
    buf = io.BytesIO()
    export(case, buf)
    model = onnx.load_from_string(buf.getvalue())
    data = os.path.join(out, "mlp_ext.onnx.data")
    if os.path.exists(data):  # onnx appends to an existing data file
        os.remove(data)
    onnx.save_model(model, os.path.join(out, "mlp_ext.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="mlp_ext.onnx.data", size_threshold=0)
    write_ref(case, os.path.join(out, "mlp_ext.ref"), "mlp_ext")


def write_handmade(out):
    """handmade_o17: ops torch.onnx did not write above, in typed (not raw) tensor fields, with
    the reference loss from numpy: Gemm alpha/beta, Sigmoid, Neg, Reciprocal, Split into equal
    parts, ConstantOfShape + Trilu folded into a constant, Where with a bool initializer,
    Unsqueeze, Expand to a shape computed from Shape(x), Softmax over the first axis, Flatten,
    a strided Slice, Gather with Range indices, Exp/Log/Tanh/Sqrt, ReduceSum with axes input."""
    n = B * 4
    rng = np.random.default_rng(5)
    w = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    keep = np.array([True, False, True])
    H = helper
    inits = [H.make_tensor("W", TensorProto.FLOAT, [4, 6], w.flatten().tolist()),
             H.make_tensor("b", TensorProto.FLOAT, [6], b.tolist()),
             H.make_tensor("keep", TensorProto.BOOL, [3], keep.tolist()),
             H.make_tensor("axes", TensorProto.INT64, [2], [0, 1])]

    def const(name, **kw):
        return H.make_node("Constant", [], [name], **kw)

    nodes = [
        H.make_node("Gemm", ["x", "W", "b"], ["h"], alpha=0.5, beta=2.0),
        H.make_node("Sigmoid", ["h"], ["s"]), H.make_node("Neg", ["s"], ["t"]),
        const("two", value_float=2.0), H.make_node("Add", ["t", "two"], ["u"]),
        H.make_node("Reciprocal", ["u"], ["r"]),
        H.make_node("Split", ["r"], ["p0", "p1"], axis=1), H.make_node("Mul", ["p0", "p1"], ["m"]),
        const("shp", value_ints=[3, 3]),
        H.make_node("ConstantOfShape", ["shp"], ["ones"], value=H.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
        H.make_node("Trilu", ["ones"], ["tri"], upper=0), H.make_node("MatMul", ["m", "tri"], ["m2"]),
        const("half", value_float=0.5), H.make_node("Where", ["keep", "m2", "half"], ["wh"]),
        const("ax1", value_ints=[1]), H.make_node("Unsqueeze", ["wh", "ax1"], ["w1"]),
        H.make_node("Shape", ["x"], ["sx"]), const("i0", value_ints=[0]),
        H.make_node("Gather", ["sx", "i0"], ["n1"]), const("t23", value_ints=[2, 3]),
        H.make_node("Concat", ["n1", "t23"], ["eshape"], axis=0),
        H.make_node("Expand", ["w1", "eshape"], ["e"]), H.make_node("Softmax", ["e"], ["sm"], axis=0),
        H.make_node("Flatten", ["sm"], ["f"], axis=1),
        const("st", value_ints=[1]), const("en", value_ints=[6]), const("sa", value_ints=[1]),
        const("ss", value_ints=[2]), H.make_node("Slice", ["f", "st", "en", "sa", "ss"], ["sl"]),
        const("r0", value_int=0), const("r3", value_int=3), const("r1", value_int=1),
        H.make_node("Range", ["r0", "r3", "r1"], ["idx"]), H.make_node("Gather", ["f", "idx"], ["g"], axis=1),
        H.make_node("Sub", ["sl", "g"], ["d0"]), const("fifty", value_float=50.0),
        H.make_node("Mul", ["d0", "fifty"], ["d"]), H.make_node("Tanh", ["d"], ["th"]),
        H.make_node("Exp", ["th"], ["ex"]), const("one", value_float=1.0),
        H.make_node("Add", ["ex", "one"], ["ex1"]), H.make_node("Log", ["ex1"], ["lg"]),
        H.make_node("Mul", ["lg", "lg"], ["sq"]), H.make_node("Add", ["sq", "one"], ["sq1"]),
        H.make_node("Sqrt", ["sq1"], ["rt"]),
        H.make_node("ReduceSum", ["rt", "axes"], ["loss"], keepdims=0),
    ]
    graph = H.make_graph(nodes, "handmade", [H.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                         [H.make_tensor_value_info("loss", TensorProto.FLOAT, [])], initializer=inits)
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save_model(model, os.path.join(out, "handmade_o17.onnx"))
    # the same in numpy (float64)
    hh = 0.5 * x.astype(np.float64) @ w + 2.0 * b
    r = 1.0 / (2.0 - 1.0 / (1.0 + np.exp(-hh)))
    m = r[:, :3] * r[:, 3:]
    m2 = m @ np.tril(np.ones((3, 3)))
    wh = np.where(keep, m2, 0.5)
    e = np.broadcast_to(wh[:, None, :], (n, 2, 3))
    sm = np.exp(e) / np.exp(e).sum(axis=0, keepdims=True)
    f = sm.reshape(n, 6)
    d = 50.0 * (f[:, 1:6:2] - f[:, 0:3])
    lg = np.log(np.exp(np.tanh(d)) + 1.0)
    loss = np.sqrt(lg * lg + 1.0).sum()
    write_numpy_ref(out, "handmade_o17", n, x, loss)


def write_math(out):
    """math_o17: elementwise math at run time (Sigmoid, Sin, Cos, Abs, Sign, Max, Min) and folded at compile
    time (MatMul, Cos, Sin, Exp, Log, Tanh, Erf, Abs, Sign, Sigmoid of constants, as rotary tables
    are made), a Cast of -inf to int64 (saturates) that a Where then discards, Abs on int64; the
    reference loss from numpy."""
    n = B * 2
    rng = np.random.default_rng(7)
    w = (0.5 * rng.standard_normal((6, 6))).astype(np.float32)
    x = rng.standard_normal((n, 6)).astype(np.float32)
    p = np.array([[0.5, 1.0, 2.0]], np.float32)
    q = rng.standard_normal((3, 6)).astype(np.float32)
    z = np.arange(6, dtype=np.float32)
    ii = np.array([-3, -2, 0, 1, 2, 5], np.int64)
    H = helper

    def const(name, arr):
        return H.make_node("Constant", [], [name], value=numpy_helper.from_array(arr, name + "_v"))

    nodes = [
        H.make_node("MatMul", ["x", "W"], ["h"]),
        const("P", p), const("Q", q), H.make_node("MatMul", ["P", "Q"], ["F"]),
        H.make_node("Cos", ["F"], ["cf"]), H.make_node("Sin", ["F"], ["sf"]),
        H.make_node("Sigmoid", ["F"], ["smf"]), H.make_node("Exp", ["F"], ["ef"]),
        H.make_node("Log", ["ef"], ["lf"]), H.make_node("Tanh", ["F"], ["tf"]),
        H.make_node("Erf", ["F"], ["erf"]), const("one", np.array(1.0, np.float32)),
        H.make_node("Sub", ["F", "one"], ["f1"]), H.make_node("Abs", ["f1"], ["af"]),
        H.make_node("Sign", ["f1"], ["sgf"]),
        H.make_node("Mul", ["sf", "smf"], ["t1"]), H.make_node("Mul", ["tf", "erf"], ["t2"]),
        H.make_node("Mul", ["af", "sgf"], ["t3"]), const("tenth", np.array(0.1, np.float32)),
        H.make_node("Mul", ["lf", "tenth"], ["t4"]), H.make_node("Add", ["cf", "t1"], ["u1"]),
        H.make_node("Add", ["u1", "t2"], ["u2"]), H.make_node("Add", ["u2", "t3"], ["u3"]),
        H.make_node("Add", ["u3", "t4"], ["table"]),
        const("z", z), H.make_node("Log", ["z"], ["lz"]),
        H.make_node("Cast", ["lz"], ["ci"], to=TensorProto.INT64),
        const("ii", ii), H.make_node("Abs", ["ii"], ["ai"]), const("zero", np.array(0.0, np.float32)),
        H.make_node("Equal", ["z", "zero"], ["isz"]), H.make_node("Where", ["isz", "ai", "ci"], ["safe"]),
        H.make_node("Cast", ["safe"], ["sf2"], to=TensorProto.FLOAT),
        H.make_node("Sigmoid", ["h"], ["sh"]), H.make_node("Mul", ["sh", "table"], ["r1"]),
        H.make_node("Sin", ["h"], ["sinh"]), H.make_node("Cos", ["h"], ["cosh"]),
        H.make_node("Mul", ["sinh", "cosh"], ["r2"]), H.make_node("Abs", ["h"], ["abh"]),
        H.make_node("Mul", ["abh", "sf2"], ["r3"]), H.make_node("Sign", ["h"], ["sgh"]),
        H.make_node("Mul", ["sgh", "h"], ["r4"]),
        H.make_node("Add", ["r1", "r2"], ["v1"]), H.make_node("Add", ["v1", "r3"], ["v2"]),
        H.make_node("Add", ["v2", "r4"], ["v3"]), const("floor", np.array(-0.5, np.float32)),
        H.make_node("Max", ["h", "floor"], ["r5"]), H.make_node("Min", ["h", "sh", "sinh"], ["r6"]),
        H.make_node("Add", ["v3", "r5"], ["v4"]), H.make_node("Add", ["v4", "r6"], ["v5"]),
        H.make_node("Mul", ["v5", "v5"], ["sq"]),
        H.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0),
    ]
    graph = H.make_graph(nodes, "math", [H.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
                         [H.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                         initializer=[numpy_helper.from_array(w, "W")])
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save_model(model, os.path.join(out, "math_o17.onnx"))
    # the same in numpy (float64)
    from math import erf
    f = p.astype(np.float64) @ q
    table = (np.cos(f) + np.sin(f) / (1.0 + np.exp(-f)) + np.tanh(f) * np.vectorize(erf)(f)
             + np.abs(f - 1.0) * np.sign(f - 1.0) + 0.1 * f)
    sf2 = np.array([3, 0, 0, 1, 1, 1], np.float64)  # Where(z == 0, |ii|, int(log z))
    h = x.astype(np.float64) @ w
    sh = 1.0 / (1.0 + np.exp(-h))
    v = sh * table + np.sin(h) * np.cos(h) + np.abs(h) * sf2 + np.abs(h)
    v = v + np.maximum(h, -0.5) + np.minimum(np.minimum(h, sh), np.sin(h))
    loss = (v * v).mean()
    write_numpy_ref(out, "math_o17", n, x, loss)


def write_pool(out):
    """pool_o17: what Swin's and ResNet's exports do around pooling, by hand: the padding of
    H up to a multiple of the window computed from Shape(x) with Mod (folded: (w - H mod w)
    mod w), a Pad in constant mode with a cut (a negative pad) and the value 0.5 around a
    trained per-channel scale, GlobalAveragePool, Flatten, a float Mod with fmod=1 of
    constants (folded), MatMul; the reference loss from numpy."""
    n, c, hh, ww = B, 3, 5, 4
    rng = np.random.default_rng(13)
    x = rng.standard_normal((n, c, hh, ww)).astype(np.float32)
    sc = (1.0 + 0.5 * rng.standard_normal((1, c, 1, 1))).astype(np.float32)
    w = rng.standard_normal((c, 4)).astype(np.float32)
    H = helper

    def const(name, arr):
        return H.make_node("Constant", [], [name], value=numpy_helper.from_array(arr, name + "_v"))

    nodes = [
        H.make_node("Mul", ["x", "S"], ["xs"]),
        H.make_node("Shape", ["x"], ["sx"]), const("i2", np.array(2, np.int64)),
        H.make_node("Gather", ["sx", "i2"], ["h"]), const("win", np.array(4, np.int64)),
        H.make_node("Mod", ["h", "win"], ["hm"]), H.make_node("Sub", ["win", "hm"], ["ph0"]),
        H.make_node("Mod", ["ph0", "win"], ["ph"]), const("ax0", np.array([0], np.int64)),
        H.make_node("Unsqueeze", ["ph", "ax0"], ["phu"]),
        const("m7", np.array(-7, np.int64)), H.make_node("Mod", ["m7", "win"], ["one"]),
        H.make_node("Unsqueeze", ["one", "ax0"], ["oneu"]),
        const("pa", np.array([0, 0, 1, -1, 0, 0], np.int64)),
        H.make_node("Concat", ["pa", "phu", "oneu"], ["pads"], axis=0),
        const("pv", np.array(0.5, np.float32)), H.make_node("Pad", ["xs", "pads", "pv"], ["xp"]),
        H.make_node("GlobalAveragePool", ["xp"], ["gp"]), H.make_node("Flatten", ["gp"], ["f"], axis=1),
        const("cf", np.array([5.5, -5.5, 7.0], np.float32)), const("two", np.array(2.0, np.float32)),
        H.make_node("Mod", ["cf", "two"], ["fm"], fmod=1), H.make_node("Mul", ["f", "fm"], ["g"]),
        H.make_node("MatMul", ["g", "W"], ["o"]), H.make_node("Mul", ["o", "o"], ["sq"]),
        H.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0),
    ]
    graph = H.make_graph(nodes, "pool", [H.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c, hh, ww])],
                         [H.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                         initializer=[numpy_helper.from_array(sc, "S"), numpy_helper.from_array(w, "W")])
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save_model(model, os.path.join(out, "pool_o17.onnx"))
    # the same in numpy (float64): pads (0, 0, 1, -1) at the starts, (0, 0, 3, 1) at the ends
    xs = x.astype(np.float64) * sc
    xp = np.pad(xs[:, :, :, 1:], ((0, 0), (0, 0), (1, 3), (0, 1)), constant_values=0.5)
    g = xp.mean(axis=(2, 3)) * np.array([1.5, -1.5, 1.0])
    o = g @ w
    loss = (o * o).mean()
    write_numpy_ref(out, "pool_o17", n, x, loss)


def write_gather_elements(out):
    """gather_elements_o17: GatherElements of constants (folded), along the rows and along
    the columns with negative indices, as GPT-J and CodeGen index their rotary tables with
    the positions; the results scale a run-time product; the reference loss from numpy."""
    n = B * 2
    rng = np.random.default_rng(17)
    w = (0.5 * rng.standard_normal((6, 6))).astype(np.float32)
    x = rng.standard_normal((n, 6)).astype(np.float32)
    t = rng.standard_normal((4, 6)).astype(np.float32)
    i0 = rng.integers(-4, 4, (3, 6)).astype(np.int64)
    i1 = rng.integers(-6, 6, (4, 2)).astype(np.int64)
    H = helper

    def const(name, arr):
        return H.make_node("Constant", [], [name], value=numpy_helper.from_array(arr, name + "_v"))

    nodes = [
        H.make_node("MatMul", ["x", "W"], ["h"]), const("T", t), const("I0", i0), const("I1", i1),
        H.make_node("GatherElements", ["T", "I0"], ["g0"], axis=0),
        H.make_node("GatherElements", ["T", "I1"], ["g1"], axis=-1),
        const("ax0", np.array([0], np.int64)),
        H.make_node("ReduceSum", ["g0", "ax0"], ["s0"], keepdims=1),
        H.make_node("ReduceSum", ["g1"], ["s1"], keepdims=0),
        H.make_node("Mul", ["h", "s0"], ["r"]), H.make_node("Mul", ["r", "r"], ["sq"]),
        H.make_node("ReduceMean", ["sq"], ["m"], keepdims=0), H.make_node("Add", ["m", "s1"], ["loss"]),
    ]
    graph = H.make_graph(nodes, "gather_elements", [H.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
                         [H.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                         initializer=[numpy_helper.from_array(w, "W")])
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save_model(model, os.path.join(out, "gather_elements_o17.onnx"))
    t64 = t.astype(np.float64)
    g0 = np.take_along_axis(t64, np.where(i0 < 0, i0 + 4, i0), axis=0)
    g1 = np.take_along_axis(t64, np.where(i1 < 0, i1 + 6, i1), axis=1)
    r = (x.astype(np.float64) @ w) * g0.sum(axis=0, keepdims=True)
    loss = (r * r).mean() + g1.sum()
    write_numpy_ref(out, "gather_elements_o17", n, x, loss)


def write_cumsum(out):
    """cumsum_o17: CumSum of constants (folded), as OPT makes its positions from an all-ones
    mask (int64, inclusive, along the rows' last axis; then times the mask, minus 1, plus 2),
    and of a float table exclusive and reversed along axis 0; the positions embedded and both
    scaling a run-time product; the reference loss from numpy."""
    n, t = B * 2, 6
    rng = np.random.default_rng(19)
    w = (0.5 * rng.standard_normal((t, t))).astype(np.float32)
    x = rng.standard_normal((n, t)).astype(np.float32)
    tab = rng.standard_normal((4, t)).astype(np.float32)
    pos_emb = rng.standard_normal((t + 2, t)).astype(np.float32)
    H = helper

    def const(name, arr):
        return H.make_node("Constant", [], [name], value=numpy_helper.from_array(arr, name + "_v"))

    nodes = [
        H.make_node("MatMul", ["x", "W"], ["h"]),
        const("ones", np.ones((1, t), np.int64)), const("ax1", np.array(1, np.int64)),
        H.make_node("CumSum", ["ones", "ax1"], ["cs"]), H.make_node("Mul", ["cs", "ones"], ["cm"]),
        const("one", np.array(1, np.int64)), H.make_node("Sub", ["cm", "one"], ["p0"]),
        const("two", np.array(2, np.int64)), H.make_node("Add", ["p0", "two"], ["pos"]),
        H.make_node("Gather", ["E", "pos"], ["pe"]),
        const("T", tab), const("ax0", np.array(0, np.int64)),
        H.make_node("CumSum", ["T", "ax0"], ["ct"], exclusive=1, reverse=1),
        const("axes0", np.array([0], np.int64)),
        H.make_node("ReduceSum", ["ct", "axes0"], ["st"], keepdims=1),
        const("axes01", np.array([0, 1], np.int64)),
        H.make_node("ReduceSum", ["pe", "axes01"], ["sp"], keepdims=0),
        H.make_node("Mul", ["h", "st"], ["r"]), H.make_node("Add", ["r", "sp"], ["r2"]),
        H.make_node("Mul", ["r2", "r2"], ["sq"]), H.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0),
    ]
    graph = H.make_graph(nodes, "cumsum", [H.make_tensor_value_info("x", TensorProto.FLOAT, ["N", t])],
                         [H.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                         initializer=[numpy_helper.from_array(w, "W"), numpy_helper.from_array(pos_emb, "E")])
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save_model(model, os.path.join(out, "cumsum_o17.onnx"))
    pos = np.cumsum(np.ones((1, t), np.int64), axis=1) - 1 + 2          # [[2 .. t+1]]
    pe = pos_emb.astype(np.float64)[pos]                                 # [1, t, t]
    ct = np.flip(np.cumsum(np.flip(tab.astype(np.float64), 0), 0), 0) - tab   # exclusive, reversed
    r = (x.astype(np.float64) @ w) * ct.sum(axis=0, keepdims=True) + pe.sum(axis=(0, 1))
    loss = (r * r).mean()
    write_numpy_ref(out, "cumsum_o17", n, x, loss)


def write_compare(out):
    """compare_o17: comparisons of run-time tensors into masks: h > 0.1 fills h with 0 (Where),
    h <= g of two run-time tensors and relu(h) == relu(g) (equal where both are negative) cast to float
    and multiplied in, Not of the first, And of two; the reference loss from numpy."""
    n, t = B * 2, 6
    rng = np.random.default_rng(23)
    w = (0.5 * rng.standard_normal((t, t))).astype(np.float32)
    w2 = (0.5 * rng.standard_normal((t, t))).astype(np.float32)
    x = rng.standard_normal((n, t)).astype(np.float32)
    H = helper

    def const(name, arr):
        return H.make_node("Constant", [], [name], value=numpy_helper.from_array(arr, name + "_v"))

    nodes = [
        H.make_node("MatMul", ["x", "W"], ["h"]), H.make_node("MatMul", ["x", "W2"], ["g"]),
        const("tenth", np.array(0.1, np.float32)), const("zero", np.array(0.0, np.float32)),
        H.make_node("Greater", ["h", "tenth"], ["big"]),
        H.make_node("Where", ["big", "zero", "h"], ["small"]),
        H.make_node("LessOrEqual", ["h", "g"], ["le"]),
        H.make_node("Cast", ["le"], ["lef"], to=TensorProto.FLOAT),
        H.make_node("Relu", ["h"], ["hr"]), H.make_node("Relu", ["g"], ["gr"]),
        H.make_node("Equal", ["hr", "gr"], ["eq"]),
        H.make_node("Not", ["big"], ["notbig"]), H.make_node("And", ["notbig", "le"], ["both"]),
        H.make_node("Cast", ["eq"], ["eqf"], to=TensorProto.FLOAT),
        H.make_node("Cast", ["both"], ["bothf"], to=TensorProto.FLOAT),
        H.make_node("Mul", ["small", "small"], ["s2"]), H.make_node("Mul", ["lef", "g"], ["lg"]),
        H.make_node("Mul", ["eqf", "h"], ["eh"]), H.make_node("Mul", ["bothf", "g"], ["bg"]),
        H.make_node("Add", ["s2", "lg"], ["a1"]), H.make_node("Add", ["a1", "eh"], ["a2"]),
        H.make_node("Add", ["a2", "bg"], ["a3"]), H.make_node("ReduceMean", ["a3"], ["loss"], keepdims=0),
    ]
    graph = H.make_graph(nodes, "compare", [H.make_tensor_value_info("x", TensorProto.FLOAT, ["N", t])],
                         [H.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                         initializer=[numpy_helper.from_array(w, "W"), numpy_helper.from_array(w2, "W2")])
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save_model(model, os.path.join(out, "compare_o17.onnx"))
    h, g = x @ w, x @ w2   # float32, as the program computes them
    big, le = h > np.float32(0.1), h <= g
    eq = np.maximum(h, 0) == np.maximum(g, 0)
    small = np.where(big, 0.0, h).astype(np.float64)
    both = ~big & le
    loss = (small * small + le * g + eq * h + both * g).astype(np.float64).mean()
    write_numpy_ref(out, "compare_o17", n, x, loss)


def write_seq2seq(out):
    """seq2seq_o17: what T5's export does with integers and masks, by hand: labels [N, 6]
    (some -100) shifted right into decoder ids by two ScatterNDs at run time (x[:, 1:] =
    labels[:, :-1], then x[:, 0] = 3), -100 replaced by 0 through Equal, Cast to bool and
    Where at run time; a causal mask from a Tile of an arange (folded); a ScatterND of
    constants (folded); the ids embedded, mixed by the mask, and scored against the labels
    with ignore_index -100; the reference loss from numpy."""
    n, t, v, c = 2, 6, 8, 4
    rng = np.random.default_rng(11)
    emb = rng.standard_normal((v, c)).astype(np.float32)
    wout = rng.standard_normal((c, v)).astype(np.float32)
    labels = rng.integers(0, v, (n, t))
    labels[1, -2:] = -100
    H = helper

    def const(name, arr):
        return H.make_node("Constant", [], [name], value=numpy_helper.from_array(arr, name + "_v"))

    rows = np.arange(n)[:, None, None]
    idx_tail = np.concatenate([np.broadcast_to(rows, (n, t - 1, 1)),
                               np.broadcast_to(np.arange(1, t)[None, :, None], (n, t - 1, 1))], axis=2)
    idx_head = np.stack([np.arange(n), np.zeros(n, np.int64)], axis=1)[:, None, :]
    nodes = [
        const("zeros", np.zeros((n, t), np.int64)),
        const("s0", np.array([0], np.int64)), const("e1", np.array([-1], np.int64)),
        const("ax1", np.array([1], np.int64)),
        H.make_node("Slice", ["labels", "s0", "e1", "ax1"], ["head"]),
        const("idx_tail", idx_tail.astype(np.int64)),
        H.make_node("ScatterND", ["zeros", "idx_tail", "head"], ["sh1"]),
        const("idx_head", idx_head.astype(np.int64)), const("start", np.full((n, 1), 3, np.int64)),
        H.make_node("ScatterND", ["sh1", "idx_head", "start"], ["sh2"]),
        const("ignored", np.array(-100, np.int64)), H.make_node("Equal", ["sh2", "ignored"], ["eq"]),
        H.make_node("Cast", ["eq"], ["eqb"], to=TensorProto.BOOL),
        const("pad", np.array(0, np.int64)), H.make_node("Where", ["eqb", "pad", "sh2"], ["dec"]),
        H.make_node("Gather", ["E", "dec"], ["x"]),
        const("ar", np.arange(t, dtype=np.int64)[None, :]), const("reps", np.array([t, 1], np.int64)),
        H.make_node("Tile", ["ar", "reps"], ["cols"]),
        const("rowsr", np.arange(t, dtype=np.int64)[:, None]),
        H.make_node("LessOrEqual", ["cols", "rowsr"], ["causal"]),
        H.make_node("Cast", ["causal"], ["causalf"], to=TensorProto.FLOAT),
        H.make_node("MatMul", ["causalf", "x"], ["mixed"]),
        const("sc_data", np.ones(c, np.float32)), const("sc_idx", np.array([[1], [3]], np.int64)),
        const("sc_upd", np.array([0.5, 2.0], np.float32)),
        H.make_node("ScatterND", ["sc_data", "sc_idx", "sc_upd"], ["colscale"]),
        H.make_node("Mul", ["mixed", "colscale"], ["scaled"]),
        H.make_node("MatMul", ["scaled", "W"], ["logits"]),
        const("flat", np.array([-1, v], np.int64)), H.make_node("Reshape", ["logits", "flat"], ["l2"]),
        const("flat1", np.array([-1], np.int64)), H.make_node("Reshape", ["labels", "flat1"], ["y"]),
        H.make_node("SoftmaxCrossEntropyLoss", ["l2", "y"], ["loss"], ignore_index=-100),
    ]
    graph = H.make_graph(nodes, "seq2seq", [H.make_tensor_value_info("labels", TensorProto.INT64, [n, t])],
                         [H.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                         initializer=[numpy_helper.from_array(emb, "E"), numpy_helper.from_array(wout, "W")])
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save_model(model, os.path.join(out, "seq2seq_o17.onnx"))
    # the same in numpy (float64)
    dec = np.concatenate([np.full((n, 1), 3), labels[:, :-1]], axis=1)
    dec = np.where(dec == -100, 0, dec)
    x = emb.astype(np.float64)[dec]
    causal = (np.arange(t)[None, :] <= np.arange(t)[:, None]).astype(np.float64)
    scale = np.array([1.0, 0.5, 1.0, 2.0])
    logits = ((causal @ x) * scale @ wout).reshape(-1, v)
    y = labels.reshape(-1)
    keep = y != -100
    lse = np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1)) + logits.max(1)
    loss = (lse[keep] - logits[keep, y[keep]]).mean()
    with open(os.path.join(out, "seq2seq_o17.ref"), "w") as fh:
        fh.write("# seq2seq_o17: written by tools/onnx_models.py (reference: numpy)\n")
        fh.write(f"input labels i32 {labels.size} " + " ".join(str(int(v)) for v in labels.flatten()) + "\n")
        fh.write(f"loss {float(loss)!r}\n")


# ---- GPT-2 124M ---------------------------------------------------------------------------------


def export_124m(path):
    torch.manual_seed(0)
    m = GPT(vocab=50257, block=1024, c=768, nh=12, layers=12, dropout=0.0)
    m.eval()
    idx, tgt = tokens((4, 64), 50257, 2), tokens((4, 64), 50257, 3)
    torch.onnx.export(m, (idx, tgt), path, input_names=["idx", "targets"], output_names=["loss"], opset_version=17,
                      dynamic_axes={"idx": {0: "B", 1: "T"}, "targets": {0: "B", 1: "T"}},
                      do_constant_folding=False)
    print(f"wrote {path}: compile with  mtc compile {path} -o g124.out -D B=4 -D T=64")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--gpt2-124M", dest="gpt2", metavar="FILE")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    if a.list:
        print("\n".join(CASES))
        return
    if a.gpt2:
        export_124m(a.gpt2)
        return
    os.makedirs(a.out, exist_ok=True)
    for name in a.names or CASES:
        case = CASES[name]()
        export(case, os.path.join(a.out, name + ".onnx"))
        write_ref(case, os.path.join(a.out, name + ".ref"), name)
        print("wrote", name)
    if not a.names:
        write_external(a.out)
        write_handmade(a.out)
        write_math(a.out)
        write_seq2seq(a.out)
        write_pool(a.out)
        write_gather_elements(a.out)
        write_cumsum(a.out)
        write_compare(a.out)
        write_bad(a.out)


if __name__ == "__main__":
    sys.exit(main())
