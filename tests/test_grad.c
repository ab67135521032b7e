// Gradients of every op, checked by finite differences.
//
// Each case is a small IR graph producing %y; the harness appends a random
// projection loss = sum(y * r) (r a fixed random input), runs the pipeline,
// then compares every parameter's gradient from the interpreted backward
// against central differences of the interpreted forward.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"
#include "passes.h"
#include "rng.h"

typedef struct Case {
  const char *name;
  const char *decls;   // sym/input/param lines
  const char *body;    // forward lines producing %y (or %loss when ytype is NULL)
  const char *ytype;   // type of %y, e.g. "f32[N,C]"; NULL: the body defines %loss
  double h;            // finite-difference step
} Case;

static const Case cases[] = {
    {"matmul", "sym M = 3\nsym K = 4\nsym N = 5\nparam %a : f32[M,K] normal(1.0)\n"
               "param %b : f32[K,N] normal(1.0)\n",
     "%y : f32[M,N] = matmul(%a, %b)\n", "f32[M,N]", 1e-2},
    {"matmul_ta", "sym M = 3\nsym K = 4\nsym N = 5\nparam %a : f32[K,M] normal(1.0)\n"
                  "param %b : f32[K,N] normal(1.0)\n",
     "%y : f32[M,N] = matmul(%a, %b) ta=1\n", "f32[M,N]", 1e-2},
    {"matmul_tb", "sym M = 3\nsym K = 4\nsym N = 5\nparam %a : f32[M,K] normal(1.0)\n"
                  "param %b : f32[N,K] normal(1.0)\n",
     "%y : f32[M,N] = matmul(%a, %b) tb=1\n", "f32[M,N]", 1e-2},
    {"matmul_ta_tb", "sym M = 3\nsym K = 4\nsym N = 5\nparam %a : f32[K,M] normal(1.0)\n"
                     "param %b : f32[N,K] normal(1.0)\n",
     "%y : f32[M,N] = matmul(%a, %b) ta=1 tb=1\n", "f32[M,N]", 1e-2},
    {"matmul_batched_shared_b", "sym B = 2\nsym M = 3\nsym K = 4\nsym N = 5\n"
                                "param %a : f32[B,M,K] normal(1.0)\nparam %b : f32[K,N] normal(1.0)\n",
     "%y : f32[B,M,N] = matmul(%a, %b)\n", "f32[B,M,N]", 1e-2},
    {"matmul_batched", "sym B = 2\nsym M = 3\nsym K = 4\nsym N = 5\n"
                       "param %a : f32[B,M,K] normal(1.0)\nparam %b : f32[B,K,N] normal(1.0)\n",
     "%y : f32[B,M,N] = matmul(%a, %b)\n", "f32[B,M,N]", 1e-2},
    {"matmul_batched_tb", "sym B = 2\nsym M = 3\nsym K = 4\nsym N = 5\n"
                          "param %a : f32[B,M,K] normal(1.0)\nparam %b : f32[N,K] normal(1.0)\n",
     "%y : f32[B,M,N] = matmul(%a, %b) tb=1\n", "f32[B,M,N]", 1e-2},
    {"conv2d", "sym N = 2\nsym C = 3\nsym O = 4\nparam %x : f32[N,C,7,6] normal(1.0)\n"
               "param %w : f32[O,C,3,2] normal(1.0)\n",
     "%y : f32[N,O,2,5], %col : f32[N,6*C,10] = conv2d(%x, %w) strides=[2,1] pads=[1,0,0,1] "
     "dilations=[2,2]\n", "f32[N,O,2,5]", 1e-2},
    // groups: 6 input channels in 2 groups of 3 to 4 outputs; depthwise, 4 channels each its own
    {"conv2d_group", "sym N = 2\nparam %x : f32[N,6,7,6] normal(1.0)\n"
                     "param %w : f32[4,3,3,2] normal(1.0)\n",
     "%y : f32[N,4,2,5], %col : f32[N,36,10] = conv2d(%x, %w) strides=[2,1] pads=[1,0,0,1] "
     "dilations=[2,2] group=2\n", "f32[N,4,2,5]", 1e-2},
    {"conv2d_depthwise", "sym N = 2\nparam %x : f32[N,4,5,5] normal(1.0)\n"
                         "param %w : f32[4,1,3,3] normal(1.0)\n",
     "%y : f32[N,4,5,5], %col : f32[N,36,25] = conv2d(%x, %w) pads=[1,1,1,1] group=4\n",
     "f32[N,4,5,5]", 1e-2},
    {"conv2d_patches_bias", "sym N = 2\nsym O = 4\nparam %x : f32[N,3,8,8] normal(1.0)\n"
                            "param %w : f32[O,3,4,4] normal(1.0)\nparam %b : f32[O,1,1] normal(1.0)\n",
     "%c : f32[N,O,2,2], %col : f32[N,48,4] = conv2d(%x, %w) strides=[4,4]\n"
     "%y : f32[N,O,2,2] = add(%c, %b)\n", "f32[N,O,2,2]", 1e-2},
    // ResNet's stem pool (3x3, stride 2, padded), and an uneven overlapping window; a small step,
    // which a window's two largest values are not as close as (the max switching is no slope)
    {"maxpool2d", "sym N = 2\nparam %x : f32[N,3,7,6] normal(1.0)\n",
     "%y : f32[N,3,4,3] = maxpool2d(%x) kernel=[3,3] strides=[2,2] pads=[1,1,1,1]\n",
     "f32[N,3,4,3]", 1e-3},
    {"maxpool2d_uneven", "sym N = 2\nparam %x : f32[N,2,5,6] normal(1.0)\n",
     "%y : f32[N,2,5,6] = maxpool2d(%x) kernel=[3,2] pads=[2,1,0,0]\n", "f32[N,2,5,6]", 1e-3},
    // BatchNormalization in training mode as the ONNX frontend builds it: the batch's mean and
    // biased variance per channel, then the affine
    {"batchnorm_train", "sym N = 3\nparam %x : f32[N,2,3,3] normal(1.0)\n"
                        "param %w : f32[2,1,1] normal(1.0)\nparam %b : f32[2,1,1] normal(1.0)\n",
     "%m : f32[1,2,1,1] = mean(%x) axes=[0,2,3] keepdims=1\n"
     "%c : f32[N,2,3,3] = sub(%x, %m)\n%s : f32[N,2,3,3] = mul(%c, %c)\n"
     "%v : f32[1,2,1,1] = mean(%s) axes=[0,2,3] keepdims=1\n"
     "%e : f32[1,2,1,1] = scale(%v) s=1 b=1e-5\n%i : f32[1,2,1,1] = pow(%e) p=-0.5\n"
     "%n : f32[N,2,3,3] = mul(%c, %i)\n%a : f32[N,2,3,3] = mul(%n, %w)\n"
     "%y : f32[N,2,3,3] = add(%a, %b)\n", "f32[N,2,3,3]", 1e-2},
    {"add_broadcast", "sym B = 2\nsym T = 3\nsym C = 4\nparam %a : f32[B,T,C] normal(1.0)\n"
                      "param %b : f32[C] normal(1.0)\n",
     "%y : f32[B,T,C] = add(%a, %b)\n", "f32[B,T,C]", 1e-2},
    {"sub_broadcast", "sym T = 3\nsym C = 4\nparam %a : f32[T,C] normal(1.0)\n"
                      "param %b : f32[T,1] normal(1.0)\n",
     "%y : f32[T,C] = sub(%a, %b)\n", "f32[T,C]", 1e-2},
    {"mul_broadcast", "sym B = 2\nsym T = 3\nsym C = 4\nparam %a : f32[B,T,C] normal(1.0)\n"
                      "param %b : f32[T,C] normal(1.0)\n",
     "%y : f32[B,T,C] = mul(%a, %b)\n", "f32[B,T,C]", 1e-2},
    {"div", "sym T = 3\nsym C = 4\nparam %a : f32[T,C] normal(1.0)\nparam %b : f32[C] normal(1.0)\n",
     "%b2 : f32[C] = scale(%b) s=0.1 b=2.0\n%y : f32[T,C] = div(%a, %b2)\n", "f32[T,C]", 1e-2},
    {"scale", "sym N = 7\nparam %x : f32[N] normal(1.0)\n",
     "%y : f32[N] = scale(%x) s=-1.5 b=0.25\n", "f32[N]", 1e-2},
    {"gelu", "sym N = 3\nsym C = 5\nparam %x : f32[N,C] normal(1.0)\n",
     "%y : f32[N,C] = gelu(%x)\n", "f32[N,C]", 1e-2},
    {"relu", "sym N = 3\nsym C = 5\nparam %x : f32[N,C] normal(1.0)\n",
     "%y : f32[N,C] = relu(%x)\n", "f32[N,C]", 1e-3},
    {"layernorm", "sym N = 4\nsym C = 6\nparam %x : f32[N,C] normal(1.0)\n"
                  "param %w : f32[C] normal(1.0)\nparam %b : f32[C] normal(1.0)\n",
     "%y : f32[N,C] = layernorm(%x, %w, %b) eps=1e-5\n", "f32[N,C]", 1e-2},
    {"rmsnorm", "sym N = 4\nsym C = 6\nparam %x : f32[N,C] normal(1.0)\n"
                "param %w : f32[C] normal(1.0)\n",
     "%y : f32[N,C] = rmsnorm(%x, %w) eps=1e-6\n", "f32[N,C]", 1e-2},
    {"rope", "sym B = 2\nsym T = 5\nsym D = 6\nparam %x : f32[B,T,D] normal(1.0)\n",
     "%y : f32[B,T,D] = rope(%x) theta=10.0\n", "f32[B,T,D]", 1e-2},
    {"rope_inverse", "sym T = 4\nsym D = 4\nparam %x : f32[T,D] normal(1.0)\n",
     "%y : f32[T,D] = rope(%x) inverse=1\n", "f32[T,D]", 1e-2},
    {"softmax", "sym N = 3\nsym C = 5\nparam %x : f32[N,C] normal(1.0)\n",
     "%y : f32[N,C] = softmax(%x)\n", "f32[N,C]", 1e-2},
    {"softmax causal", "sym B = 2\nsym T = 4\nparam %x : f32[B,T,T] normal(1.0)\n",
     "%y : f32[B,T,T] = softmax(%x) causal=1\n", "f32[B,T,T]", 1e-2},
    {"attention_causal", "sym B = 2\nsym H = 2\nsym T = 4\nsym D = 3\n"
                         "param %q : f32[B,H,T,D] normal(1.0)\nparam %k : f32[B,H,T,D] normal(1.0)\n"
                         "param %v : f32[B,H,T,D] normal(1.0)\n",
     "%y : f32[B,H,T,D], %lse : f32[B,H,T] = attention(%q, %k, %v) causal=1\n", "f32[B,H,T,D]", 1e-2},
    {"attention_full", "sym B = 1\nsym H = 2\nsym T = 5\nsym D = 3\n"
                       "param %q : f32[B,H,T,D] normal(1.0)\nparam %k : f32[B,H,T,D] normal(1.0)\n"
                       "param %v : f32[B,H,T,D] normal(1.0)\n",
     "%y : f32[B,H,T,D], %lse : f32[B,H,T] = attention(%q, %k, %v) causal=0\n", "f32[B,H,T,D]", 1e-2},
    {"attention_bias", "sym B = 2\nsym H = 2\nsym T = 4\nsym D = 3\n"
                       "param %q : f32[B,H,T,D] normal(1.0)\nparam %k : f32[B,H,T,D] normal(1.0)\n"
                       "param %v : f32[B,H,T,D] normal(1.0)\nparam %b : f32[1,H,T,T] normal(1.0)\n",
     "%y : f32[B,H,T,D], %lse : f32[B,H,T] = attention(%q, %k, %v, %b) causal=1\n", "f32[B,H,T,D]", 1e-2},
    {"attention_cross", "sym B = 2\nsym H = 2\nsym T = 3\nsym S = 5\nsym D = 3\n"
                        "param %q : f32[B,H,T,D] normal(1.0)\nparam %k : f32[B,H,S,D] normal(1.0)\n"
                        "param %v : f32[B,H,S,D] normal(1.0)\nparam %b : f32[1,H,T,S] normal(1.0)\n",
     "%y : f32[B,H,T,D], %lse : f32[B,H,T] = attention(%q, %k, %v, %b) causal=0\n", "f32[B,H,T,D]", 1e-2},
    {"embedding", "sym V = 7\nsym C = 4\nsym B = 2\nsym T = 5\ninput %idx : i32[B,T] classes(V)\n"
                  "param %w : f32[V,C] normal(1.0)\n",
     "%y : f32[B,T,C] = embedding(%w, %idx)\n", "f32[B,T,C]", 1e-2},
    {"cross_entropy", "sym N = 6\nsym V = 5\ninput %t : i32[N] classes(V)\n"
                      "param %x : f32[N,V] normal(1.0)\n",
     "%loss : f32[] = cross_entropy(%x, %t)\n", NULL, 1e-2},
    {"reshape", "sym A = 2\nsym C = 6\nparam %x : f32[A,C] normal(1.0)\n",
     "%rs : f32[3,4] = reshape(%x)\n%y : f32[3,4] = mul(%rs, %rs)\n", "f32[3,4]", 1e-2},
    {"transpose", "sym A = 2\nsym B = 3\nsym C = 4\nparam %x : f32[A,B,C] normal(1.0)\n",
     "%y : f32[C,A,B] = transpose(%x) perm=[2,0,1]\n", "f32[C,A,B]", 1e-2},
    {"split_unused_part", "sym N = 2\nparam %x : f32[N,6] normal(1.0)\n",
     "%a : f32[N,2], %b : f32[N,4] = split(%x) axis=1 sizes=[2,4]\n%y : f32[N,4] = mul(%b, %b)\n",
     "f32[N,4]", 1e-2},
    {"split_symbolic", "sym N = 2\nsym C = 3\nparam %x : f32[N,3*C] normal(1.0)\n",
     "%a : f32[N,C], %b : f32[N,C], %c : f32[N,C] = split(%x) axis=1 sizes=[C,C,C]\n"
     "%ab : f32[N,C] = mul(%a, %b)\n%y : f32[N,C] = sub(%ab, %c)\n",
     "f32[N,C]", 1e-2},
    {"concat", "sym N = 2\nsym C = 3\nparam %a : f32[N,C] normal(1.0)\nparam %b : f32[1,C] normal(1.0)\n",
     "%y : f32[N+1,C] = concat(%a, %b) axis=0\n", "f32[N+1,C]", 1e-2},
    {"broadcast", "sym N = 3\nsym C = 4\nparam %x : f32[C] normal(1.0)\n",
     "%y : f32[N,C] = broadcast(%x)\n", "f32[N,C]", 1e-2},
    {"sum", "sym A = 2\nsym B = 3\nsym C = 4\nparam %x : f32[A,B,C] normal(1.0)\n",
     "%y : f32[A,C] = sum(%x) axes=[1]\n", "f32[A,C]", 1e-2},
    {"mean_keepdims", "sym A = 2\nsym B = 3\nsym C = 4\nparam %x : f32[A,B,C] normal(1.0)\n",
     "%y : f32[1,B,1] = mean(%x) axes=[0,2] keepdims=1\n", "f32[1,B,1]", 1e-2},
    {"sum_to", "sym N = 3\nsym C = 4\nparam %x : f32[N,C] normal(1.0)\n",
     "%y : f32[1,C] = sum_to(%x)\n", "f32[1,C]", 1e-2},
    {"fan_out", "sym N = 5\nparam %x : f32[N] normal(1.0)\n",
     "%xx : f32[N] = mul(%x, %x)\n%y : f32[N] = add(%xx, %x)\n", "f32[N]", 1e-2},
    // ops for ONNX models
    {"exp", "sym N = 6\nparam %x : f32[N] normal(1.0)\n", "%y : f32[N] = exp(%x)\n", "f32[N]", 1e-2},
    {"log", "sym N = 6\nparam %x : f32[N] normal(1.0)\n",
     "%q : f32[N] = scale(%x) s=0.2 b=2.0\n%y : f32[N] = log(%q)\n", "f32[N]", 1e-2},
    {"sqrt", "sym N = 6\nparam %x : f32[N] normal(1.0)\n",
     "%q : f32[N] = scale(%x) s=0.2 b=2.0\n%y : f32[N] = sqrt(%q)\n", "f32[N]", 1e-2},
    {"tanh", "sym N = 6\nparam %x : f32[N] normal(1.0)\n", "%y : f32[N] = tanh(%x)\n", "f32[N]", 1e-2},
    {"erf", "sym N = 6\nparam %x : f32[N] normal(1.0)\n", "%y : f32[N] = erf(%x)\n", "f32[N]", 1e-2},
    {"pow3", "sym N = 6\nparam %x : f32[N] normal(1.0)\n", "%y : f32[N] = pow(%x) p=3.0\n", "f32[N]", 1e-2},
    {"pow2", "sym N = 6\nparam %x : f32[N] normal(1.0)\n", "%y : f32[N] = pow(%x) p=2.0\n", "f32[N]", 1e-2},
    {"pow_reciprocal", "sym N = 6\nparam %x : f32[N] normal(1.0)\n",
     "%q : f32[N] = scale(%x) s=0.2 b=2.0\n%y : f32[N] = pow(%q) p=-1.0\n", "f32[N]", 1e-2},
    {"max_broadcast", "sym N = 3\nsym C = 4\nparam %a : f32[N,C] normal(1.0)\nparam %b : f32[C] normal(1.0)\n",
     "%y : f32[N,C] = max(%a, %b)\n", "f32[N,C]", 1e-2},
    {"min_broadcast", "sym N = 3\nsym C = 4\nparam %a : f32[N,1] normal(1.0)\nparam %b : f32[N,C] normal(1.0)\n",
     "%y : f32[N,C] = min(%a, %b)\n", "f32[N,C]", 1e-2},
    {"sin", "sym N = 6\nparam %x : f32[N] normal(1.0)\n", "%y : f32[N] = sin(%x)\n", "f32[N]", 1e-2},
    {"cos", "sym N = 6\nparam %x : f32[N] normal(1.0)\n", "%y : f32[N] = cos(%x)\n", "f32[N]", 1e-2},
    {"abs", "sym N = 6\nparam %x : f32[N] normal(1.0)\n", "%y : f32[N] = abs(%x)\n", "f32[N]", 1e-2},
    {"sign_times_x", "sym N = 6\nparam %x : f32[N] normal(1.0)\n",
     "%s : f32[N] = sign(%x)\n%y : f32[N] = mul(%s, %x)\n", "f32[N]", 1e-2},
    {"sigmoid", "sym N = 6\nparam %x : f32[N] normal(2.0)\n", "%y : f32[N] = sigmoid(%x)\n", "f32[N]",
     1e-2},
    {"silu", "sym N = 3\nsym C = 5\nparam %x : f32[N,C] normal(2.0)\n",
     "%y : f32[N,C] = silu(%x)\n", "f32[N,C]", 1e-2},
    {"gelu_erf", "sym N = 3\nsym C = 5\nparam %x : f32[N,C] normal(1.0)\n",
     "%y : f32[N,C] = gelu_erf(%x)\n", "f32[N,C]", 1e-2},
    {"masked_fill", "sym B = 2\nsym T = 3\nsym C = 4\ninput %m : i32[T,C] classes(2)\n"
                    "param %x : f32[B,T,C] normal(1.0)\n",
     "%y : f32[B,T,C] = masked_fill(%x, %m) value=-2.5\n", "f32[B,T,C]", 1e-2},
    {"cast_mask_times_x", "sym B = 2\nsym T = 5\ninput %m : i32[B,T] mask(2)\n"
                          "param %x : f32[B,T] normal(1.0)\n",
     "%c : f32[B,T] = cast(%m)\n%y : f32[B,T] = mul(%x, %c)\n", "f32[B,T]", 1e-2},
    {"dropout", "sym N = 4\nsym C = 8\nstate %step : i32[] zeros\nparam %x : f32[N,C] normal(1.0)\n",
     "%y : f32[N,C] = dropout(%x, %step) ratio=0.3 seed=5 key=2\n", "f32[N,C]", 1e-2},
    {"log_softmax", "sym N = 3\nsym C = 5\nparam %x : f32[N,C] normal(1.0)\n",
     "%y : f32[N,C] = log_softmax(%x)\n", "f32[N,C]", 1e-2},
    {"nll_loss", "sym N = 6\nsym V = 5\ninput %t : i32[N] classes(V)\nparam %x : f32[N,V] normal(1.0)\n",
     "%lp : f32[N,V] = log_softmax(%x)\n%loss : f32[] = nll_loss(%lp, %t)\n", NULL, 1e-2},
    {"nll_loss_sum_ignore", "sym N = 6\nsym V = 3\ninput %t : i32[N] classes(V)\n"
                            "param %x : f32[N,V] normal(1.0)\n",
     "%loss : f32[] = nll_loss(%x, %t) sum=1 ignore_index=1\n", NULL, 1e-2},
    {"cumsum", "sym A = 2\nsym B = 5\nsym C = 3\nparam %x : f32[A,B,C] normal(1.0)\n",
     "%y : f32[A,B,C] = cumsum(%x) axis=1\n", "f32[A,B,C]", 1e-2},
    {"cumsum_exclusive_reverse", "sym A = 2\nsym B = 5\nparam %x : f32[A,B] normal(1.0)\n",
     "%y : f32[A,B] = cumsum(%x) axis=-1 exclusive=1 reverse=1\n", "f32[A,B]", 1e-2},
    {"cumsum_reverse_times_x", "sym N = 6\nparam %x : f32[N] normal(1.0)\n",
     "%c : f32[N] = cumsum(%x) axis=0 reverse=1\n%y : f32[N] = mul(%c, %x)\n", "f32[N]", 1e-2},
    // a mask from comparing two run-time tensors (no gradient) selects the product's terms
    {"compare_mask", "sym N = 2\nsym C = 4\nparam %a : f32[N,C] normal(1.0)\n"
                     "param %b : f32[C] normal(1.0)\n",
     "%m : i32[N,C] = compare(%a, %b) cmp=4\n%f : f32[N,C] = cast(%m)\n"
     "%y : f32[N,C] = mul(%f, %a)\n", "f32[N,C]", 1e-2},
    // positions counted at run time (RoBERTa's from the tokens) pick the table's rows
    {"positions_from_tokens", "sym B = 2\nsym T = 5\nsym C = 3\ninput %ids : i32[B,T] classes(3)\n"
                              "param %w : f32[9,C] normal(1.0)\n",
     "%pad : i32[B,T] = equal(%ids) value=1\n%keep : i32[B,T] = equal(%pad) value=0\n"
     "%n : i32[B,T] = cumsum(%keep) axis=1\n%m : i32[B,T] = mul(%n, %keep)\n"
     "%pos : i32[B,T] = scale(%m) s=1 b=1\n%y : f32[B,T,C] = embedding(%w, %pos)\n",
     "f32[B,T,C]", 1e-2},
    {"slice_strided", "sym N = 2\nparam %x : f32[N,7] normal(1.0)\n",
     "%y : f32[N,3] = slice(%x) axis=1 start=1 step=2\n", "f32[N,3]", 1e-2},
    {"slice_rows", "sym N = 5\nsym C = 3\nparam %x : f32[N,C] normal(1.0)\n",
     "%y : f32[2,C] = slice(%x) axis=0 start=2\n", "f32[2,C]", 1e-2},
    // ONNX's Pad (frontend/onnx_ops.c): blocks of the value concatenated, a cut sliced off
    {"pad", "sym N = 2\nparam %x : f32[N,3,4] normal(1.0)\n",
     "%f0 : f32[N,1,4] = fill() value=0.5\n%f1 : f32[N,2,4] = fill() value=0.5\n"
     "%c : f32[N,6,4] = concat(%f0, %x, %f1) axis=1\n%y : f32[N,6,3] = slice(%c) axis=2 start=1\n",
     "f32[N,6,3]", 1e-2},
    // ... and GlobalAveragePool: the mean over the spatial dims, kept
    {"global_average_pool", "param %x : f32[2,3,4,5] normal(1.0)\n",
     "%y : f32[2,3,1,1] = mean(%x) axes=[2,3] keepdims=1\n", "f32[2,3,1,1]", 1e-2},
};

static int passed, failed;

// Fill every input with random data (classes/tokens: integers in range).
static void fill_inputs(IrGraph *g, CgInterp *it, uint64_t seed) {
  rt_rng rng;
  rt_rng_seed(&rng, seed);
  for (int i = 0; i < g->nvalues; i++) {
    IrValue *v = g->values[i];
    if (v->role != ROLE_INPUT)
      continue;
    int64_t n = ir_eval(g, ir_numel(g, v));
    if (v->dtype == DT_I32) {
      int64_t range = ir_eval(g, v->range);
      for (int64_t k = 0; k < n; k++)
        cg_interp_i32(it, v)[k] = (int32_t)rt_rng_below(&rng, (uint64_t)range);
    } else {
      for (int64_t k = 0; k < n; k++)
        cg_interp_f32(it, v)[k] = rt_rng_normal(&rng);
    }
  }
}

static float loss_of(CgInterp *it, IrGraph *g) {
  cg_interp_run(it, PHASE_FORWARD, NULL);
  return *cg_interp_f32(it, g->loss);
}

static void run_case(const Case *c) {
  char text[8192];
  if (c->ytype)
    snprintf(text, sizeof text,
             "graph \"%s\"\n%sinput %%r : %s\nforward\n%s%%p : %s = mul(%%y, %%r)\n"
             "%%loss : f32[] = sum(%%p)\nloss %%loss\n",
             c->name, c->decls, c->ytype, c->body, c->ytype);
  else
    snprintf(text, sizeof text, "graph \"%s\"\n%sforward\n%sloss %%loss\n", c->name, c->decls,
             c->body);
  IrDiag d = {0};
  IrGraph *g = ir_parse(text, c->name, &d);
  PassCtx ctx = {.opt = pass_default_options(), .diag = &d};
  if (!g || pass_run_all(g, &ctx)) {
    printf("FAIL %s: ", c->name);
    ir_diag_print(stdout, &d);
    failed++;
    pass_memplan_free(ctx.mem);
    ir_graph_free(g);
    return;
  }
  CgInterp *it = cg_interp_new(g, ctx.mem, &d);
  IR_ASSERT(it);
  cg_interp_init_params(it, 42);
  fill_inputs(g, it, 7);
  loss_of(it, g);
  cg_interp_run(it, PHASE_BACKWARD, NULL);
  // Gradients share arena memory with forward temporaries, so copy them all
  // out before the finite differences run the forward again.
  float **grads = calloc((size_t)g->nvalues, sizeof *grads);
  for (int i = 0; i < g->nvalues; i++) {
    IrValue *p = g->values[i];
    if (p->role != ROLE_PARAM)
      continue;
    size_t bytes = (size_t)ir_eval(g, ir_nbytes(g, p));
    grads[i] = malloc(bytes);
    memcpy(grads[i], cg_interp_f32(it, p->grad), bytes);
  }
  double worst = 0;
  for (int i = 0; i < g->nvalues; i++) {
    IrValue *p = g->values[i];
    if (p->role != ROLE_PARAM)
      continue;
    int64_t n = ir_eval(g, ir_numel(g, p));
    float *analytic = grads[i];
    float *x = cg_interp_f32(it, p);
    for (int64_t k = 0; k < n; k++) {
      float keep = x[k];
      x[k] = keep + (float)c->h;
      double lp = loss_of(it, g);
      x[k] = keep - (float)c->h;
      double lm = loss_of(it, g);
      x[k] = keep;
      double fd = (lp - lm) / (2 * c->h);
      double err = fabs(fd - analytic[k]) / fmax(1.0, fmax(fabs(fd), fabs(analytic[k])));
      if (err > worst)
        worst = err;
    }
    free(analytic);
  }
  free(grads);
  bool ok = worst < 1e-2;
  printf("%s %s: max normalized error %.2e\n", ok ? "ok  " : "FAIL", c->name, worst);
  ok ? passed++ : failed++;
  cg_interp_free(it);
  pass_memplan_free(ctx.mem);
  ir_graph_free(g);
}

int main(void) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    run_case(&cases[i]);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
