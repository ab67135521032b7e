"""What tools/parity_*.py share: PyTorch references for mtc's parity tests.

A reference is a folder (a "fixture") that tests/parity.sh checks an mtc
program against:

    batch.safetensors   the fixed batch, one tensor per model input (train --inputs)
    grads.safetensors   every parameter's gradient after one backward, by name
    ref.json            the first loss and the losses of STEPS AdamW and SGD steps
    ref_bf16.json, grads_bf16.safetensors
                        the same under PyTorch's bf16 autocast (AdamW only; some fixtures)
    parity.env          how to compile and run: mtc_args, load, adamw_args, sgd_args
    model_o17.onnx ...  the exported model (ONNX fixtures)
    weights.safetensors the initial weights by DSL name (DSL fixtures: train --load)

Everything runs in float32 on the CPU, as mtc's program does. Run with Debian's
python3-torch: /usr/bin/python3 (torch 1.13, onnx 1.12).
"""
import copy
import json
import os
import shlex

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from parity_check import st_write

STEPS = 10


def optimizer_args(kind, o):
    """train's flags for an optimizer config."""
    if kind == "adamw":
        return (f"--optimizer adamw --lr {o['lr']!r} --beta1 {o['betas'][0]!r} --beta2 {o['betas'][1]!r} "
                f"--eps {o['eps']!r} --weight-decay {o['weight_decay']!r}")
    return f"--optimizer sgd --lr {o['lr']!r} --weight-decay {o['weight_decay']!r}"


def param_groups(model, weight_decay):
    """nanoGPT's groups, which mtc compiles by default: weight decay on the
    parameters of two or more dims (matrices, embeddings), none on the others
    (norms, biases)."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def make_optimizer(kind, o, model):
    groups = param_groups(model, o["weight_decay"])
    if kind == "adamw":
        return torch.optim.AdamW(groups, lr=o["lr"], betas=o["betas"], eps=o["eps"])
    return torch.optim.SGD(groups, lr=o["lr"])


def reference(model, loss_fn, batch, opts, steps=STEPS):
    """The first loss, the gradients of one backward ({name: array}, names as
    model.named_parameters()) and, for each optimizer in opts ({"adamw": {...},
    "sgd": {...}}), the losses of `steps` steps from the same initial weights.
    loss_fn(model, batch) computes the loss on the fixed batch."""
    start = copy.deepcopy(model.state_dict())
    model.zero_grad(set_to_none=True)
    loss = loss_fn(model, batch)
    loss.backward()
    out = {"loss": float(loss)}
    grads = {n: p.grad.detach().numpy().copy() for n, p in model.named_parameters() if p.grad is not None}
    for kind, o in opts.items():
        model.load_state_dict(start)
        opt = make_optimizer(kind, o, model)
        losses = []
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model, batch)
            losses.append(float(loss))
            loss.backward()
            opt.step()
        out[kind] = losses
    model.load_state_dict(start)
    return out, grads


def reference_bf16(model, loss_fn, batch, opts, steps=STEPS):
    """reference() under PyTorch's own mixed precision, as users train: the
    forward in torch.autocast("cpu", dtype=torch.bfloat16), the parameters
    (master weights), their gradients and AdamW's state in float32. Only the
    AdamW trajectory (opts["adamw"])."""
    start = copy.deepcopy(model.state_dict())
    # LayerNorm in float32, as autocast's CUDA policy has it (torch 1.13's CPU
    # autocast leaves it out and then refuses a bf16 input with a float32 weight)
    hooks = [m.register_forward_pre_hook(lambda mod, args: tuple(
                 a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args))
             for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_fn(model, batch)
    loss.float().backward()
    out = {"loss": float(loss)}
    grads = {n: p.grad.detach().float().numpy().copy() for n, p in model.named_parameters()
             if p.grad is not None}
    opt = make_optimizer("adamw", opts["adamw"], model)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_fn(model, batch)
        losses.append(float(loss))
        loss.float().backward()
        opt.step()
    out["adamw"] = losses
    for h in hooks:
        h.remove()
    model.load_state_dict(start)
    model.zero_grad(set_to_none=True)
    return out, grads


def write_bf16(out, ref, grads):
    """The bf16 reference beside a fixture: ref_bf16.json, grads_bf16.safetensors."""
    st_write(os.path.join(out, "grads_bf16.safetensors"), grads,
             {"content": "PyTorch gradients after one backward under bf16 autocast"})
    with open(os.path.join(out, "ref_bf16.json"), "w") as f:
        json.dump(dict(ref, torch=torch.__version__,
                       note="torch.autocast('cpu', dtype=torch.bfloat16), float32 master weights"),
                  f, indent=1)
        f.write("\n")
    print(f"wrote {out} (bf16): loss {ref['loss']:.6f}; adamw {ref['adamw'][0]:.4f} -> "
          f"{ref['adamw'][-1]:.4f}")


def float64_drift(model, loss_fn, batch, grads):
    """How far fp32 PyTorch itself is from exact (fp64) on the initial weights:
    a line for the fixture's note, to set mtc's errors against."""
    m64 = copy.deepcopy(model).double()
    b64 = {k: v.double() if v.is_floating_point() else v for k, v in batch.items()}
    try:
        loss = loss_fn(m64, b64)
    except RuntimeError as e:  # transformers' Mistral mask builder on torch 1.13, in float64
        return f"PyTorch fp64 does not run this model ({str(e).splitlines()[0]}): no fp64 drift"
    loss.backward()
    worst = 0.0
    for name, p in m64.named_parameters():
        ref = p.grad.numpy()
        scale = np.max(np.abs(ref))
        if scale > 0:
            worst = max(worst, float(np.max(np.abs(grads[name] - ref)) / scale))
    l32, l64 = float(loss_fn(model, batch)), float(loss)
    return (f"PyTorch fp32 vs fp64 on this batch: loss relative error {abs(l32 - l64) / abs(l64):.1e}, "
            f"worst gradient relative error {worst:.1e}")


def export_onnx(model, inputs, path, opset, dynamic_axes, output="loss"):
    """torch.onnx.export with the initializers named as the parameters and
    one initializer per parameter: training mode (in eval mode the exporter
    merges parameters with equal values, e.g. all the zero biases of one
    shape, into one initializer), no constant folding (which would rename
    transposed weights), initializers not listed as inputs. Checks the names
    and values. The models have no dropout, so training mode computes what
    eval mode does, except BatchNorm's: export traces the model, which in
    training mode updates its running statistics, so those buffers are put
    back as they were, in the model and in the file's initializers."""
    buffers = {k: v.detach().clone() for k, v in model.state_dict().items()
               if k.endswith(("running_mean", "running_var"))}
    torch.onnx.export(model, tuple(inputs.values()), path, input_names=list(inputs), output_names=[output],
                      opset_version=opset, dynamic_axes=dynamic_axes, export_params=True,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      keep_initializers_as_inputs=False)
    model.load_state_dict(buffers, strict=False)
    if buffers:
        m = onnx.load(path)
        for t in m.graph.initializer:
            if t.name in buffers:
                t.CopyFrom(numpy_helper.from_array(buffers[t.name].numpy(), t.name))
        onnx.save(m, path)
    model.eval()
    inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    for name, p in model.named_parameters():
        if name not in inits:
            raise SystemExit(f"{path}: no initializer named {name!r} (initializers: {sorted(inits)})")
        if not np.array_equal(inits[name], p.detach().numpy()):
            raise SystemExit(f"{path}: initializer {name!r} differs from the parameter")


def write_fixture(out, batch, ref, grads, opts, mtc_args, load="", note=""):
    """Writes batch, grads, ref.json and parity.env to the folder out."""
    os.makedirs(out, exist_ok=True)
    st_write(os.path.join(out, "batch.safetensors"), {k: v.numpy() for k, v in batch.items()})
    st_write(os.path.join(out, "grads.safetensors"), grads, {"content": "PyTorch gradients after one backward"})
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump(dict(ref, torch=torch.__version__, note=note), f, indent=1)
        f.write("\n")
    with open(os.path.join(out, "parity.env"), "w") as f:
        f.write("# How tests/parity.sh compiles and runs this model; written by tools/parity_*.py.\n")
        f.write(f"mtc_args={shlex.quote(mtc_args)}\n")
        f.write(f"load={shlex.quote(load)}\n")
        for kind, o in opts.items():
            f.write(f"{kind}_args={shlex.quote(optimizer_args(kind, o))}\n")
    print(f"wrote {out}: loss {ref['loss']:.6f}; adamw {ref['adamw'][0]:.4f} -> {ref['adamw'][-1]:.4f}; "
          f"sgd {ref['sgd'][0]:.4f} -> {ref['sgd'][-1]:.4f}")


def perturb_norms(model, seed):
    """LayerNorm weights ~ N(1, 0.1) and biases ~ N(0, 0.1) instead of PyTorch's
    ones and zeros, so that a mix-up of the two cannot hide in the gradients."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.copy_(1 + 0.1 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))


def tokens(shape, hi, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, hi, shape, generator=g)


def randn(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g)
