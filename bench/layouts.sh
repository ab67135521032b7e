# The models and layouts of the distributed benchmarks (bench/dist.sh,
# bench/fidelity.sh), sourced: GPT-2 small (examples/gpt2.mtc's default
# config) and GPT-2 124M (vocabulary $vocab_124m), T=64, B=4 sequences per
# data-parallel rank; each layout as ranks|name|mtc compile flags.
# shellcheck shell=bash disable=SC2034
models=(
  "small|-D T=64 -D B=4"
  "124M|-D L=12 -D C=768 -D NH=12 -D V=$vocab_124m -D T=64 -D B=4"
)
layouts=(   # ranks|name|flags
  "1|1 rank|"
  "2|DP2|--dp 2"
  "4|DP4|--dp 4"
  "2|ZeRO-3 DP2|--dp 2 --zero 3"
  "4|ZeRO-3 DP4|--dp 4 --zero 3"
  "2|TP2|--tp 2"
  "2|TP2+SP|--tp 2 --seq-parallel"
  "4|TP4|--tp 4"
  "4|TP4+SP|--tp 4 --seq-parallel"
  "4|DP2 x TP2|--dp 2 --tp 2"
  "4|DP2 x TP2+SP|--dp 2 --tp 2 --seq-parallel"
  "4|DP2 x TP2, layers DP4|--dp 2 --tp 2 --layers-dp"
  "4|TP4, layers TP2|--tp 4 --layers-tp 2"
  "4|2D 2x2|--tp2d 2"
  "1|offload|--offload 1"
  "1|offload + grads|--offload-grads"
  "2|ZeRO-2 DP2 offload + grads|--dp 2 --zero 2 --offload-grads"
  "1|offload + params|--offload-params"
  "2|ZeRO-3 DP2 offload + params|--dp 2 --offload-params"
)

