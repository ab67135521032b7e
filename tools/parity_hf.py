#!/usr/bin/env python3
"""Hugging Face transformers models, exported to ONNX as a user would, and the
reference numbers mtc's CPU program must reproduce (tests/parity.sh).

    tools/parity_hf.py                  # every family, into tests/fixtures/parity/hf_*
    tools/parity_hf.py llama gpt2       # some of them
    tools/parity_hf.py --out DIR        # elsewhere
    tools/parity_hf.py --list
    tools/parity_hf.py llama_dsl        # examples/llama.mtc with HF Llama's weights
    tools/parity_hf.py --big --out DIR  # GPT-2 124M and a 100M Llama, to compile and train

Each family is a small random-init config (no weights are downloaded) of a
transformers model class with its own loss (labels in, loss out), exported with
torch.onnx.export in training mode without constant folding, at opsets 17 and
14 with the batch and sequence dims fixed, and at opset 17 with them as
dynamic axes (model_o17_dyn.onnx, compiled with -D B=.. -D T=..; an image
model's batch alone, -D B=..). The folder
hf_NAME holds the models and the reference of parity_lib.py (first loss,
every gradient, 10 AdamW and 10 SGD losses on one fixed batch).

T5 (t5: ReLU feed-forward, exported at opsets 17 and 14; t5_gated: gated-GELU,
with dynamic axes B, TE, TD) is an encoder-decoder: input_ids [B, TE=16],
labels [B, TD=8] (two of them -100), which the model shifts right into its
decoder's inputs.

transformers is not a dependency of mtc or of its tests: run this script with a
virtualenv that sees Debian's python3-torch (torch 1.13):

    /usr/bin/python3 -m venv --system-site-packages ~/venv-hf
    ~/venv-hf/bin/pip install transformers==4.40.2
    ~/venv-hf/bin/python tools/parity_hf.py
"""
import argparse
import copy
import os
import sys

import torch

import parity_lib as pl
from parity_check import st_write

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "tests", "fixtures", "parity")
B, T = 2, 16
OPTS = {"adamw": dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1),
        "sgd": dict(lr=0.1, weight_decay=0.01)}


class Loss(torch.nn.Module):
    """A transformers model and its own loss: the batch's tensors, in order, as
    the model's keyword arguments `names` (idx as input_ids, ...), with `extra`."""

    def __init__(self, m, names, **extra):
        super().__init__()
        self.m = m
        self.names = names
        self.extra = extra

    def forward(self, *tensors):
        return self.m(**dict(zip(self.names, tensors)), **self.extra).loss


def causal_lm(m):
    """(idx, labels) -> the shifted loss"""
    return Loss(m, ("input_ids", "labels"), use_cache=False)


def padded_causal_lm(m):
    """(idx, attention_mask, labels) -> the shifted loss over padded rows"""
    return Loss(m, ("input_ids", "attention_mask", "labels"), use_cache=False)


def lm_batch(vocab):
    return {"idx": pl.tokens((B, T), vocab, 1), "labels": pl.tokens((B, T), vocab, 2)}


def mlm_batch(vocab):
    """A quarter of the positions labelled, the rest -100 (HF's ignore index)."""
    b = lm_batch(vocab)
    b["labels"] = torch.where(pl.tokens((B, T), 4, 3) == 0, b["labels"], torch.full((B, T), -100))
    return b


# Each family: the model and its fixed batch.
def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return causal_lm(LlamaForCausalLM(cfg)), lm_batch(128)


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=128, n_positions=64, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0)
    return causal_lm(GPT2LMHeadModel(cfg)), lm_batch(128)


def opt():
    """OPT (learned positions offset by 2, computed in forward as the running sum of the
    attention mask the model makes itself: a CumSum mtc folds; ReLU feed-forward, pre-norm).
    Its token embedding has padding_idx 1, whose row PyTorch's lookup leaves without a
    gradient; an ONNX graph does not say so (a Gather), so the batch holds no token 1."""
    from transformers import OPTConfig, OPTForCausalLM
    cfg = OPTConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, ffn_dim=64,
                    num_attention_heads=4, max_position_embeddings=64, word_embed_proj_dim=32,
                    dropout=0.0, attention_dropout=0.0, layerdrop=0.0)
    batch = {k: 2 + v % 126 for k, v in lm_batch(128).items()}   # tokens 2..127: no padding
    return causal_lm(OPTForCausalLM(cfg)), batch


def opt_mask():
    """OPT with a padding mask: its learned positions are the running sum of the mask the user
    gives, at run time (a CumSum of the int64 mask, times the mask, minus one, plus the offset
    2); padded positions take position 1 and are masked out of the scores."""
    from transformers import OPTConfig, OPTForCausalLM
    cfg = OPTConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, ffn_dim=64,
                    num_attention_heads=4, max_position_embeddings=64, word_embed_proj_dim=32,
                    dropout=0.0, attention_dropout=0.0, layerdrop=0.0)
    batch = padded_lm_batch(128)
    batch["idx"] = 2 + batch["idx"] % 126   # tokens 2..127: no padding token in the batch
    return padded_causal_lm(OPTForCausalLM(cfg)), batch


def roberta_mlm():
    """RoBERTa for masked LM: its positions come from the tokens at run time (input_ids !=
    padding_idx 1, a CumSum of that, times it, plus padding_idx), so the second row's tail of
    padding tokens takes position 1; with the tokenizer's attention_mask."""
    from transformers import RobertaConfig, RobertaForMaskedLM
    cfg = RobertaConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, pad_token_id=1)
    b = mlm_batch(128)
    b["idx"] = 2 + b["idx"] % 126          # no padding token but in the padded tail
    b["idx"][1, 10:] = 1
    b["attention_mask"] = torch.ones(B, T, dtype=torch.long)
    b["attention_mask"][1, 10:] = 0
    b["labels"][1, 10:] = -100
    batch = {k: b[k] for k in ("idx", "attention_mask", "labels")}
    return Loss(RobertaForMaskedLM(cfg), ("input_ids", "attention_mask", "labels")), batch


def electra_mask():
    """ELECTRA's discriminator with a padding mask: its loss is a BCE over the positions the mask
    keeps, logits[mask == 1] (NonZero, then GatherND), a mean over a count known at run time;
    labels 0 or 1 (replaced or not) at every position."""
    from transformers import ElectraConfig, ElectraForPreTraining
    cfg = ElectraConfig(vocab_size=128, embedding_size=32, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    batch = padded_lm_batch(128)
    batch["labels"] = pl.tokens((B, T), 2, 3)
    return Loss(ElectraForPreTraining(cfg), ("input_ids", "attention_mask", "labels")), batch


def gptj():
    """GPT-J: rotary embeddings on the first rotary_dim dims of each head, interleaved (its sin
    and cos tables repeat_interleave'd: a Split of a known tensor, folded), the scores masked
    and then scaled, attention and MLP in parallel off one LayerNorm."""
    from transformers import GPTJConfig, GPTJForCausalLM
    cfg = GPTJConfig(vocab_size=128, n_positions=64, n_embd=32, n_layer=2, n_head=4, rotary_dim=4,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return causal_lm(GPTJForCausalLM(cfg)), lm_batch(128)


def codegen():
    """CodeGen: GPT-J's rotary embeddings and parallel blocks, q, k and v from one fused
    projection split per model-parallel group (shape arithmetic on known tensors, folded)."""
    from transformers import CodeGenConfig, CodeGenForCausalLM
    cfg = CodeGenConfig(vocab_size=128, n_positions=64, n_ctx=64, n_embd=32, n_layer=2, n_head=4,
                        rotary_dim=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return causal_lm(CodeGenForCausalLM(cfg)), lm_batch(128)


def padded_lm_batch(vocab):
    """The second row padded after 10 tokens: attention_mask 0 and labels -100 there."""
    b = lm_batch(vocab)
    b["attention_mask"] = torch.ones(B, T, dtype=torch.long)
    b["attention_mask"][1, 10:] = 0
    b["labels"][1, 10:] = -100
    return {k: b[k] for k in ("idx", "attention_mask", "labels")}


def llama_mask():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return padded_causal_lm(LlamaForCausalLM(cfg)), padded_lm_batch(128)


def mistral_mask():
    """Mistral with a padding mask: transformers builds its additive mask at run time from the
    int64 mask (an Expand, 1 - mask as float, a Cast to bool, masked_fill with finfo.min)."""
    from transformers import MistralConfig, MistralForCausalLM
    cfg = MistralConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                        sliding_window=None)
    return padded_causal_lm(MistralForCausalLM(cfg)), padded_lm_batch(128)


def distilbert_mask():
    """DistilBERT for masked LM with a padding mask, which it fills into the scores itself:
    (mask == 0).view(...).expand_as(scores), masked_fill with finfo.min."""
    from transformers import DistilBertConfig, DistilBertForMaskedLM
    cfg = DistilBertConfig(vocab_size=128, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                           max_position_embeddings=64, dropout=0.0, attention_dropout=0.0)
    return Loss(DistilBertForMaskedLM(cfg), ("input_ids", "attention_mask", "labels")), \
        padded_lm_batch(128)


def gpt2_mask():
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=128, n_positions=64, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0)
    return padded_causal_lm(GPT2LMHeadModel(cfg)), padded_lm_batch(128)


def bert_mlm():
    from transformers import BertConfig, BertForMaskedLM
    cfg = BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)
    return Loss(BertForMaskedLM(cfg), ("input_ids", "labels")), mlm_batch(128)


def albert_mlm():
    """ALBERT for masked LM: one shared layer applied three times (num_hidden_groups 1), and a
    factorized embedding (16 wide, projected to the hidden 32)."""
    from transformers import AlbertConfig, AlbertForMaskedLM
    cfg = AlbertConfig(vocab_size=128, embedding_size=16, hidden_size=32, num_hidden_layers=3,
                       num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                       classifier_dropout_prob=0.0)
    return Loss(AlbertForMaskedLM(cfg), ("input_ids", "labels")), mlm_batch(128)


def bert_cls():
    """BERT for classification with the tokenizer's attention_mask: the second
    row padded after 10 tokens, the padding ids arbitrary (they must not count)."""
    from transformers import BertConfig, BertForSequenceClassification
    cfg = BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0, num_labels=3)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 10:] = 0
    batch = {"idx": pl.tokens((B, T), 128, 1), "attention_mask": mask,
             "labels": pl.tokens((B,), 3, 2)}
    names = ("input_ids", "attention_mask", "labels")
    return Loss(BertForSequenceClassification(cfg), names), batch


def vit():
    """ViT on 16x16 images of 3 channels, 4x4 patches (a 4x4 grid and the CLS
    token: 17 positions), 10 classes; labels [B]."""
    from transformers import ViTConfig, ViTForImageClassification
    cfg = ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=4, intermediate_size=64, num_labels=10, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0)
    batch = {"pixel_values": pl.randn((B, 3, 16, 16), 1), "labels": pl.tokens((B,), 10, 2)}
    return Loss(ViTForImageClassification(cfg), ("pixel_values", "labels")), batch


def resnet():
    """ResNet of basic blocks (a stem of 8 channels: a 7x7 convolution of stride 2 and a 3x3 max
    pool of stride 2; two stages of one block, 8 and 16 channels) on 16x16 images of 3 channels,
    5 classes; labels [B]. Its BatchNorms train on the batch's statistics: the reference runs in
    train() mode (TRAIN), and the export is training mode's."""
    from transformers import ResNetConfig, ResNetForImageClassification
    cfg = ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                       layer_type="basic", num_labels=5)
    batch = {"pixel_values": pl.randn((B, 3, 16, 16), 1), "labels": pl.tokens((B,), 5, 2)}
    return Loss(ResNetForImageClassification(cfg), ("pixel_values", "labels")), batch


TE, TD = 16, 8  # T5's encoder and decoder lengths


def seq2seq_lm(m):
    """(idx [B, TE], labels [B, TD]) -> loss; the model shifts the labels right into its
    decoder's inputs (-100 becomes the pad id there)."""
    return Loss(m, ("input_ids", "labels"), use_cache=False)


def t5_config(ff):
    from transformers import T5Config
    return T5Config(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                    relative_attention_num_buckets=8, relative_attention_max_distance=16,
                    dropout_rate=0.0, feed_forward_proj=ff, decoder_start_token_id=0, pad_token_id=0)


def t5_batch(vocab):
    """Encoder ids [B, TE]; labels [B, TD] with the last two of the second row -100 (padding)."""
    labels = pl.tokens((B, TD), vocab, 2)
    labels[1, -2:] = -100
    return {"idx": pl.tokens((B, TE), vocab, 1), "labels": labels}


def t5():
    from transformers import T5ForConditionalGeneration
    return seq2seq_lm(T5ForConditionalGeneration(t5_config("relu"))), t5_batch(128)


def t5_gated():
    from transformers import T5ForConditionalGeneration
    return seq2seq_lm(T5ForConditionalGeneration(t5_config("gated-gelu"))), t5_batch(128)


def swin():
    """Swin on 16x16 images of 3 channels: 2x2 patches (an 8x8 grid), windows of 3 (the grid
    padded to 9x9 in each block), two stages of 2 blocks (the second's windows shifted) and a
    patch merging between them, 10 classes; labels [B]."""
    from transformers import SwinConfig, SwinForImageClassification
    cfg = SwinConfig(image_size=16, patch_size=2, num_channels=3, embed_dim=16, depths=[2, 2],
                     num_heads=[2, 4], window_size=3, mlp_ratio=2.0, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0, drop_path_rate=0.0, num_labels=10)
    batch = {"pixel_values": pl.randn((B, 3, 16, 16), 1), "labels": pl.tokens((B,), 10, 2)}
    return Loss(SwinForImageClassification(cfg), ("pixel_values", "labels")), batch


def convnext():
    """ConvNeXt on 16x16 images of 3 channels: a 2x2 patchify stem, two stages (8 and 16
    channels, one block each: a depthwise 7x7 convolution, LayerNorm over the channels, an
    inverted MLP and a layer scale) with a downsampling between them, 10 classes; labels [B]."""
    from transformers import ConvNextConfig, ConvNextForImageClassification
    cfg = ConvNextConfig(num_channels=3, patch_size=2, num_stages=2, hidden_sizes=[8, 16],
                         depths=[1, 1], drop_path_rate=0.0, num_labels=10)
    batch = {"pixel_values": pl.randn((B, 3, 16, 16), 1), "labels": pl.tokens((B,), 10, 2)}
    return Loss(ConvNextForImageClassification(cfg), ("pixel_values", "labels")), batch


def whisper():
    """Whisper on 8 mel bins of 32 frames (two 1-D convolutions, the second of stride 2: 16
    positions), a 2-layer encoder and decoder of width 32, a vocabulary of 128; labels [B, 8]
    (two of them -100), which the model shifts right into its decoder's inputs."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration
    cfg = WhisperConfig(vocab_size=128, num_mel_bins=8, encoder_layers=2, decoder_layers=2,
                        encoder_attention_heads=4, decoder_attention_heads=4, d_model=32,
                        encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=16,
                        max_target_positions=32, dropout=0.0, attention_dropout=0.0,
                        activation_dropout=0.0, pad_token_id=0, decoder_start_token_id=1,
                        bos_token_id=1, eos_token_id=2, suppress_tokens=[], begin_suppress_tokens=[])
    labels = pl.tokens((B, 8), 128, 2)
    labels[1, -2:] = -100
    batch = {"input_features": pl.randn((B, 8, 32), 1), "labels": labels}
    return Loss(WhisperForConditionalGeneration(cfg), ("input_features", "labels"),
                use_cache=False), batch


def bart_mask():
    """BART for conditional generation (2 + 2 layers of width 32, vocabulary 128) on input_ids
    whose second row is padded after 10 tokens with the pad id 1 (attention_mask 0 there) and
    whose first holds it once where the mask keeps it, and
    labels [B, 8] (two of them -100), which the model shifts right into its decoder's inputs:
    the pad id's row of the shared embedding gets no gradient in PyTorch (padding_idx), and its
    final_logits_bias is a buffer."""
    from transformers import BartConfig, BartForConditionalGeneration
    cfg = BartConfig(vocab_size=128, d_model=32, encoder_layers=2, decoder_layers=2,
                     encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                     decoder_ffn_dim=64, max_position_embeddings=64, dropout=0.0,
                     attention_dropout=0.0, activation_dropout=0.0, pad_token_id=1,
                     bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
    idx = pl.tokens((B, T), 128, 1)
    idx[idx == 1] = 3
    idx[0, 3] = 1     # the pad id where the mask keeps it: a lookup PyTorch gives no gradient
    idx[1, 10:] = 1
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 10:] = 0
    labels = pl.tokens((B, 8), 128, 2)
    labels[1, -2:] = -100
    batch = {"idx": idx, "attention_mask": mask, "labels": labels}
    return Loss(BartForConditionalGeneration(cfg), ("input_ids", "attention_mask", "labels"),
                use_cache=False), batch


FAMILIES = {"llama": llama, "llama_mask": llama_mask, "mistral_mask": mistral_mask,
            "distilbert_mask": distilbert_mask,
            "gpt2": gpt2, "gpt2_mask": gpt2_mask, "opt": opt, "opt_mask": opt_mask,
            "roberta_mlm": roberta_mlm, "electra_mask": electra_mask, "gptj": gptj,
            "codegen": codegen,
            "bert_mlm": bert_mlm, "albert_mlm": albert_mlm, "bert_cls": bert_cls, "vit": vit, "resnet": resnet, "t5": t5,
            "t5_gated": t5_gated, "swin": swin, "convnext": convnext, "whisper": whisper,
            "bart_mask": bart_mask}
# The families whose reference runs in train() mode: BatchNorm on the batch's statistics (the
# others have no dropout, so both modes compute the same).
TRAIN = ("resnet",)
# The models each family exports (default: all three). The T5 models are larger (an encoder and
# a decoder), so each of the two T5 fixtures stays under 1 MB with part of the set: the ReLU
# one at the fixed opsets, the gated-GELU one with dynamic axes. GPT-2 and Llama with a padding
# mask add to the plain models' three what the mask changes: opset 17, fixed and dynamic; so do
# OPT with a mask and RoBERTa, whose positions the mask and the tokens give at run time, and
# ELECTRA, whose loss is over the positions the mask keeps; CodeGen, opset 17 fixed and dynamic
# (its shape arithmetic is what it adds); GPT-J fixed (with dynamic axes torch exports its
# repeat_interleave as a Loop over SplitToSequence's sequences, which mtc does not read). Swin
# (3,500 nodes of shape arithmetic, 0.8 MB a model) and Whisper with dynamic axes only, ConvNeXt
# at opset 14 and with dynamic axes: the suite's time. ALBERT (one shared layer run three
# times) at opset 17, fixed and dynamic.
VARIANTS = {"t5": ("o17", "o14"), "t5_gated": ("o17_dyn",), "gpt2_mask": ("o17", "o17_dyn"),
            "llama_mask": ("o17", "o17_dyn"), "mistral_mask": ("o17", "o17_dyn"),
            "distilbert_mask": ("o17",), "opt_mask": ("o17", "o17_dyn"),
            "roberta_mlm": ("o17", "o17_dyn"), "electra_mask": ("o17", "o17_dyn"),
            "gptj": ("o17",), "codegen": ("o17", "o17_dyn"), "swin": ("o17_dyn",),
            "convnext": ("o14", "o17_dyn"), "whisper": ("o17_dyn",), "bart_mask": ("o17",),
            "albert_mlm": ("o17", "o17_dyn")}
# The dynamic axes of the families whose dims are not B and T: {input: {axis: name}}, and the
# values that parity.env gives them
DYNAMIC = {"t5_gated": ({"idx": {0: "B", 1: "TE"}, "labels": {0: "B", 1: "TD"}},
                        f"-D B={B} -D TE={TE} -D TD={TD}"),
           "whisper": ({"input_features": {0: "B"}, "labels": {0: "B", 1: "TD"}},
                       f"-D B={B} -D TD=8")}


def perturb_norms(model, seed):
    """Norm weights ~ N(1, 0.1) and biases ~ N(0, 0.1) instead of ones and zeros
    (LayerNorm, BatchNorm2d, and RMSNorm classes, which have no bias), so that a mix-up
    cannot hide in the gradients."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if not type(m).__name__.endswith(("Norm", "LayerNorm", "BatchNorm2d")):
                continue
            m.weight.copy_(1 + 0.1 * torch.randn(m.weight.shape, generator=g))
            if getattr(m, "bias", None) is not None:
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))


def loss_fn(model, batch):
    return model(*batch.values())


def running_stats_after_sgd(model, batch, steps=pl.STEPS):
    """The BatchNorms' running statistics after the reference's SGD steps from the initial
    state (train() mode updates them each forward), by their state_dict names, which are the
    ONNX initializers' names; the model is left as it was."""
    start, mode = copy.deepcopy(model.state_dict()), model.training
    model.train()
    opt = pl.make_optimizer("sgd", OPTS["sgd"], model)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss_fn(model, batch).backward()
        opt.step()
    out = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()
           if k.endswith(("running_mean", "running_var"))}
    model.load_state_dict(start)
    model.train(mode)
    return out


# The families whose gradients that are zero in exact arithmetic (the key projections' biases:
# softmax ignores them) round to more than 1e-6 of the largest gradient in float32, mtc's and
# PyTorch's apart: the share of the largest gradient below which a tensor is compared at that
# scale (tests/parity.sh's grad_floor).
GRAD_FLOOR = {"opt": 1e-5, "opt_mask": 1e-5}

# the families with a bf16 reference too (ref_bf16.json, grads_bf16.safetensors)
BF16 = ("llama",)

# Buffers that the export writes as initializers, which PyTorch does not train (Whisper's
# encoder positions: requires_grad=False): mtc's --freeze REGEX for them.
FREEZE = {"whisper": "encoder.embed_positions", "bart_mask": "final_logits_bias"}

# Embedding tables whose padding_idx row PyTorch does not train (which ONNX's Gather does not
# say): mtc's --padding-idx REGEX=ROW for them.
PADDING = {"bart_mask": "shared=1"}

# The families whose reference runs without oneDNN (mkldnn): in Debian's torch 1.13 its float32
# backward of a 1-D convolution fed a permuted gradient (Whisper's front end) gives NaN, where
# float64 and the native kernels agree to 2e-7.
NO_MKLDNN = ("whisper",)


def write(name, out_root, bf16_only=False):
    torch.manual_seed(0)
    torch.backends.mkldnn.enabled = name not in NO_MKLDNN
    model, batch = FAMILIES[name]()
    perturb_norms(model, 1)
    model.train(name in TRAIN)
    out = os.path.join(out_root, "hf_" + name)
    if name in BF16:
        ref16, grads16 = pl.reference_bf16(model, loss_fn, batch, OPTS)
        pl.write_bf16(out, ref16, grads16)
    if bf16_only:
        return
    ref, grads = pl.reference(model, loss_fn, batch, OPTS)
    note = pl.float64_drift(model, loss_fn, batch, grads)
    print(name, note)
    os.makedirs(out, exist_ok=True)
    variants = VARIANTS.get(name, ("o17", "o14", "o17_dyn"))
    for opset in (17, 14):
        if f"o{opset}" in variants:
            pl.export_onnx(model, batch, os.path.join(out, f"model_o{opset}.onnx"), opset, None)
    # Token inputs [B, T] vary in both dims; images [B, C, H, W] and labels [B] in the batch only.
    dynamic = {k: {0: "B", 1: "T"} if v.dim() == 2 else {0: "B"} for k, v in batch.items()}
    dynamic_args = f"-D B={B} -D T={T}" if any(v.dim() == 2 for v in batch.values()) else f"-D B={B}"
    if name in DYNAMIC:
        dynamic, dynamic_args = DYNAMIC[name]
    if "o17_dyn" in variants:
        pl.export_onnx(model, batch, os.path.join(out, "model_o17_dyn.onnx"), 17, dynamic)
    # no quotes: parity.sh splits these
    extra = (f" --freeze {FREEZE[name]}" if name in FREEZE else "") + \
        (f" --padding-idx {PADDING[name]}" if name in PADDING else "")
    dynamic_args += extra
    pl.write_fixture(out, batch, ref, grads, OPTS, extra.strip(), note=note)
    if name in GRAD_FLOOR:
        with open(os.path.join(out, "parity.env"), "a") as f:
            f.write(f"grad_floor='{GRAD_FLOOR[name]:g}'\n")
    if name in TRAIN:   # tests/parity.sh compares them with the program's after its SGD steps
        st_write(os.path.join(out, "running_sgd.safetensors"), running_stats_after_sgd(model, batch),
                 {"content": f"BatchNorm running statistics after {pl.STEPS} SGD steps"})
    if "o17_dyn" in variants:
        with open(os.path.join(out, "parity.env"), "a") as f:
            f.write(f"dynamic_args='{dynamic_args}'\n")


# ---- examples/llama.mtc against transformers' Llama -------------------------------------------

class NextTokenLoss(torch.nn.Module):
    """The DSL's loss: cross-entropy of every position's logits against targets
    [B, T] as given (no shift inside, unlike HF's labels)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, idx, targets):
        logits = self.m(input_ids=idx, use_cache=False).logits
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


# examples/llama.mtc's names in block h.N: (the name in model.layers.N, transposed: the DSL
# computes x @ W, a torch Linear x @ W.T)
LLAMA_DSL_BLOCK = {"attn_norm": ("input_layernorm.weight", False),
                   "wq": ("self_attn.q_proj.weight", True), "wk": ("self_attn.k_proj.weight", True),
                   "wv": ("self_attn.v_proj.weight", True), "wo": ("self_attn.o_proj.weight", True),
                   "mlp_norm": ("post_attention_layernorm.weight", False),
                   "w_gate": ("mlp.gate_proj.weight", True), "w_up": ("mlp.up_proj.weight", True),
                   "w_down": ("mlp.down_proj.weight", True)}


def llama_dsl_names(layers):
    """{DSL name: (name in the wrapped model, transposed)}."""
    names = {"wte": ("m.model.embed_tokens.weight", False), "norm": ("m.model.norm.weight", False),
             "lm_head": ("m.lm_head.weight", True)}
    for i in range(layers):
        for dsl, (pt, tr) in LLAMA_DSL_BLOCK.items():
            names[f"h.{i}.{dsl}"] = (f"m.model.layers.{i}.{pt}", tr)
    return names


def write_llama_dsl(out_root):
    """tests/fixtures/parity/llama_dsl: examples/llama.mtc with a transformers
    LlamaForCausalLM's initial weights (weights.safetensors, by DSL name), its
    gradients and losses under the DSL's loss."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    dims = dict(B=B, T=T, C=32, L=2, NH=4, NKV=2, F=64, V=128)
    cfg = LlamaConfig(vocab_size=dims["V"], hidden_size=dims["C"], intermediate_size=dims["F"],
                      num_hidden_layers=dims["L"], num_attention_heads=dims["NH"],
                      num_key_value_heads=dims["NKV"], max_position_embeddings=64, rms_norm_eps=1e-5,
                      rope_theta=10000.0)
    model = NextTokenLoss(LlamaForCausalLM(cfg))
    perturb_norms(model, 1)
    model.eval()
    batch = {"idx": pl.tokens((B, T), dims["V"], 1), "targets": pl.tokens((B, T), dims["V"], 2)}
    fn = lambda m, b: m(b["idx"], b["targets"])  # noqa: E731
    ref, grads = pl.reference(model, fn, batch, OPTS)
    note = pl.float64_drift(model, fn, batch, grads)
    print("llama_dsl", note)
    names = llama_dsl_names(dims["L"])
    weights = {n: p.detach().numpy() for n, p in model.named_parameters()}
    to_dsl = lambda t: {d: (t[pt].T if tr else t[pt]).copy() for d, (pt, tr) in names.items()}  # noqa: E731
    out = os.path.join(out_root, "llama_dsl")
    mtc_args = " ".join(f"-D {k}={v}" for k, v in dims.items())
    pl.write_fixture(out, {k: v.to(torch.int32) for k, v in batch.items()}, ref, to_dsl(grads), OPTS,
                     mtc_args, load="weights.safetensors", note=note)
    st_write(os.path.join(out, "weights.safetensors"), to_dsl(weights), {"content": "initial weights"})


# ---- full-size models: compile and train, not committed ----------------------------------------

def gpt2_124m():
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # GPT-2 small: 124M
    return causal_lm(GPT2LMHeadModel(cfg)), cfg.vocab_size


def llama_100m():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=8,
                      num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=1024)
    return causal_lm(LlamaForCausalLM(cfg)), cfg.vocab_size


BIG = {"gpt2_124M": gpt2_124m, "llama_100M": llama_100m}


def write_big(name, out_root, b=4, t=128):
    """OUT/hf_NAME: model_o17.onnx (batch and sequence as dynamic axes) and
    batch.safetensors ([b, t]); prints the parameter count and PyTorch's loss
    on that batch, which `train --inputs batch.safetensors` starts from."""
    torch.manual_seed(0)
    model, vocab = BIG[name]()
    model.eval()
    batch = {"idx": pl.tokens((b, t), vocab, 1), "labels": pl.tokens((b, t), vocab, 2)}
    with torch.no_grad():
        loss = float(loss_fn(model, batch))
    out = os.path.join(out_root, "hf_" + name)
    os.makedirs(out, exist_ok=True)
    dynamic = {k: {0: "B", 1: "T"} for k in batch}
    pl.export_onnx(model, batch, os.path.join(out, "model_o17.onnx"), 17, dynamic)
    st_write(os.path.join(out, "batch.safetensors"), {k: v.to(torch.int32).numpy() for k, v in batch.items()})
    n = sum(p.numel() for p in model.parameters())
    print(f"wrote {out}: {n / 1e6:.1f}M parameters; PyTorch loss on batch.safetensors {loss:.6f} "
          f"(compile with -D B={b} -D T={t})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=FIXTURES, help="where the fixture folders go")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--big", action="store_true", help="the full-size models (GPT-2 124M, a Llama of "
                    "100M) into --out, for compiling and training; not fixtures")
    ap.add_argument("--bf16-only", action="store_true",
                    help="only the bf16 references of the families in BF16")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    if a.list:
        print("\n".join(list(FAMILIES) + ["llama_dsl"] + [f"{n} (--big)" for n in BIG]))
        return 0
    if a.big:
        for name in a.names or BIG:
            write_big(name, a.out)
        return 0
    for name in a.names or list(FAMILIES) + ["llama_dsl"]:
        if name == "llama_dsl":
            write_llama_dsl(a.out)
        elif not a.bf16_only or name in BF16:
            write(name, a.out, a.bf16_only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
