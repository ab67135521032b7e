#!/usr/bin/env bash
# Writes to stdout an IR text file of about N nodes: an MLP chain (each layer
# h = h + gelu(h @ w), then a cross-entropy head), the form mtc inspect prints
# and reads back. Large graphs without repeated blocks for bench/compile_time.sh
# and the planner's tests.
#
#   tools/chain_ir.sh N > chain.ir
set -euo pipefail
awk -v n="${1:?usage: chain_ir.sh N}" 'BEGIN {
  layers = int((n - 2) / 3)
  print "graph \"chain\""; print "sym B = 4"; print "sym C = 16"; print "sym K = 10"
  print "input %x : f32[B,C]"; print "input %y : i32[B] classes(K)"
  for (i = 1; i <= layers; i++) printf "param %%w%d : f32[C,C] normal(0.02)\n", i
  print "param %head : f32[C,K] normal(0.02)"
  print "forward"
  h = "x"
  for (i = 1; i <= layers; i++) {
    printf "  %%a%d : f32[B,C] = matmul(%%%s, %%w%d)\n", i, h, i
    printf "  %%g%d : f32[B,C] = gelu(%%a%d)\n", i, i
    printf "  %%h%d : f32[B,C] = add(%%%s, %%g%d)\n", i, h, i
    h = "h" i
  }
  printf "  %%logits : f32[B,K] = matmul(%%%s, %%head)\n", h
  print "  %loss : f32[] = cross_entropy(%logits, %y)"
  print "loss %loss"
}'
