// A hand-written stand-in for a generated model.c, so that runtime/train.c can
// be built and run end to end:
//
//   gcc -std=c11 -O2 -fopenmp -Wall -Wextra -Iruntime runtime/kernels_cpu.c
//       runtime/train.c tests/fake_model.c -lopenblas -lm -o /tmp/train_fake
//
// Default: a linear softmax classifier. x (8, 4) ~ normal, labels (8) in
// [0, 3); params W (4, 3), b (3) (weights file: 15 floats); logits = x @ W + b;
// mean cross-entropy; AdamW.
//
// With -DFAKE_TOKENS: a bigram language model, to exercise --data. idx and
// targets (2, 4) from the token stream, vocabulary 16; param wte (16, 16)
// (weights file: 256 floats); logits = wte[idx]; cross-entropy; AdamW.
//
// The arena is laid out by hand, every tensor 64-byte aligned: parameters,
// AdamW moments and inputs first (persistent), then activations and
// gradients. mmap zero-fills it, so the moments start at zero.
#include "kernels.h"
#include "model_api.h"

#define F(off) ((float *)(arena + (off)))
#define I(off) ((int *)(arena + (off)))

#define BETA1 0.9f
#define BETA2 0.999f
#define ADAM_EPS 1e-8f
#define WEIGHT_DECAY 0.0f

#ifndef FAKE_TOKENS

enum { N = 8, D = 4, K = 3 };
enum {
  OFF_W = 0, OFF_B = 64, OFF_MW = 128, OFF_VW = 192, OFF_MB = 256,
  OFF_VB = 320, OFF_X = 384, OFF_Y = 512,       // persistent: 576 bytes
  OFF_LOGITS = 576, OFF_LOSS = 704, OFF_DLOSS = 768, OFF_DLOGITS = 832,
  OFF_DW = 960, OFF_DB = 1024, ARENA = 1088,
};

static void forward(char *arena) {
  long shape[2] = {N, K}, astride[2] = {K, 1}, bstride[2] = {0, 1};
  rt_matmul(F(OFF_LOGITS), F(OFF_X), F(OFF_W), 1, N, K, D, 0, 0, 0, 0, 0);
  rt_binary(RT_ADD, F(OFF_LOGITS), F(OFF_LOGITS), F(OFF_B), 2, shape, astride,
            bstride);
  rt_crossentropy_fwd(F(OFF_LOSS), F(OFF_LOGITS), I(OFF_Y), N, K);
}

static void backward(char *arena) {
  long shape[2] = {N, K}, ostride[2] = {0, 1};
  rt_fill(F(OFF_DLOSS), 1, 1.0f);
  rt_crossentropy_bwd(F(OFF_DLOGITS), F(OFF_DLOSS), F(OFF_LOGITS), I(OFF_Y), N, K);
  // dW = x^T @ dlogits ; db = sum over rows of dlogits
  rt_matmul(F(OFF_DW), F(OFF_X), F(OFF_DLOGITS), 1, D, K, N, 1, 0, 0, 0, 0);
  rt_reduce_sum(F(OFF_DB), F(OFF_DLOGITS), 2, shape, ostride, K, 1.0f);
}

static void update(char *arena, float lr, int step) {
  rt_adamw(F(OFF_W), F(OFF_DW), F(OFF_MW), F(OFF_VW), D * K, lr, BETA1, BETA2,
           ADAM_EPS, WEIGHT_DECAY, step);
  rt_adamw(F(OFF_B), F(OFF_DB), F(OFF_MB), F(OFF_VB), K, lr, BETA1, BETA2,
           ADAM_EPS, WEIGHT_DECAY, step);
}

static const rt_tensor inputs[] = {
    {"x", OFF_X, N * D, RT_F32, RT_IN_RANDN, 0, "(N, D) = (8, 4)"},
    {"labels", OFF_Y, N, RT_I32, RT_IN_CLASSES, K, "(N) = (8)"},
};
static const rt_tensor params[] = {
    {"W", OFF_W, D * K, RT_F32, 0, 0, "(D, K) = (4, 3)"},
    {"b", OFF_B, K, RT_F32, 0, 0, "(K) = (3)"},
};

const rt_model mtc_model = {
    .name = "fake_linear_classifier",
    .arena_bytes = ARENA,
    .persistent_bytes = OFF_LOGITS,
    .peak_live_bytes = ARENA,
    .n_inputs = 2,
    .inputs = inputs,
    .n_params = 2,
    .params = params,
    .loss_offset = OFF_LOSS,
    .tokens_per_step = N,
    // fwd: matmul 2NDK + bias NK + ce ~4NK; bwd: ce ~4NK + matmul 2NDK + sum NK;
    // adamw ~12 flops per parameter
    .flops_per_step = 4.0 * N * D * K + 10.0 * N * K + 12.0 * (D * K + K),
    .forward = forward,
    .backward = backward,
    .update = update,
};

#else  // FAKE_TOKENS

enum { N = 8, V = 16 };
enum {
  OFF_WTE = 0, OFF_M = 1024, OFF_V = 2048, OFF_IDX = 3072, OFF_TGT = 3136,
  // persistent: 3200 bytes
  OFF_LOGITS = 3200, OFF_LOSS = 3712, OFF_DLOSS = 3776, OFF_DLOGITS = 3840,
  OFF_DWTE = 4352, ARENA = 5376,
};

static void forward(char *arena) {
  rt_embedding_fwd(F(OFF_LOGITS), F(OFF_WTE), I(OFF_IDX), N, V);
  rt_crossentropy_fwd(F(OFF_LOSS), F(OFF_LOGITS), I(OFF_TGT), N, V);
}

static void backward(char *arena) {
  rt_fill(F(OFF_DLOSS), 1, 1.0f);
  rt_crossentropy_bwd(F(OFF_DLOGITS), F(OFF_DLOSS), F(OFF_LOGITS), I(OFF_TGT), N, V);
  rt_embedding_bwd(F(OFF_DWTE), F(OFF_DLOGITS), I(OFF_IDX), N, V, V);
}

static void update(char *arena, float lr, int step) {
  rt_adamw(F(OFF_WTE), F(OFF_DWTE), F(OFF_M), F(OFF_V), V * V, lr, BETA1, BETA2,
           ADAM_EPS, WEIGHT_DECAY, step);
}

static const rt_tensor inputs[] = {
    {"idx", OFF_IDX, N, RT_I32, RT_IN_TOKENS, V, "(B, T) = (2, 4)"},
    {"targets", OFF_TGT, N, RT_I32, RT_IN_TARGETS, V, "(B, T) = (2, 4)"},
};
static const rt_tensor params[] = {
    {"wte", OFF_WTE, V * V, RT_F32, 0, 0, "(V, V) = (16, 16)"},
};

const rt_model mtc_model = {
    .name = "fake_bigram",
    .arena_bytes = ARENA,
    .persistent_bytes = OFF_LOGITS,
    .peak_live_bytes = ARENA,
    .n_inputs = 2,
    .inputs = inputs,
    .n_params = 1,
    .params = params,
    .loss_offset = OFF_LOSS,
    .tokens_per_step = N,
    .flops_per_step = 10.0 * N * V + 12.0 * V * V,
    .forward = forward,
    .backward = backward,
    .update = update,
};

#endif
