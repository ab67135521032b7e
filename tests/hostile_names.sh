#!/usr/bin/env bash
# Names are data: a model whose names are hostile C compiles (model.c with
# -Wall -Wextra -Werror) and trains exactly as the same model with plain names,
# and nothing of a name runs. Through the DSL (GPT-2, and GPT as Megatron ran it,
# with dropout and a causal softmax: dims, parameters, lets, the
# model named after C keywords, macros and model.c's and the runtime's own
# names: a dim named l was once shadowed by the layer loop's counter) and
# ONNX (tests/onnx_edit.c gives every value, node and the graph a hostile
# name: code after a newline, a trailing backslash, quotes, trigraphs, control
# and non-ASCII bytes; dim_params named l and b; the model's file name holds a
# quote, a backslash and a newline).
#
#   hostile_names.sh MTC ONNX_EDIT OUTDIR
set -euo pipefail
mtc=$1 edit=$2 out=$3
src=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$out"
mkdir -p "$out"
fails=0

# losses NAME MODEL ARGS...: compile, build with warnings as errors, train 3
# steps (on $RANKS ranks under tests/mpirun.sh when set); prints the losses
# (and fails on any output that says PWNED)
losses() {
  local dir=$out/$1 model=$2 run=()
  shift 2
  [ -n "${RANKS:-}" ] && run=(env OMP_NUM_THREADS=1 "$src/tests/mpirun.sh" "$RANKS")
  "$mtc" compile "$model" -o "$dir" "$@" > "$dir.log" 2>&1 ||
    { cat "$dir.log"; echo "FAIL: mtc compile ($1)" >&2; return 1; }
  make -s -C "$dir" cpu CFLAGS="-O1 -fopenmp -std=c11 -Wall -Wextra -Werror" > "$dir.make" 2>&1 ||
    { head -40 "$dir.make"; echo "FAIL: model.c of $dir does not compile" >&2; return 1; }
  (cd "$dir" && "${run[@]}" ./train --steps 3) > "$dir.train" 2>&1 ||
    { cat "$dir.train"; echo "FAIL: train ($dir)" >&2; return 1; }
  if grep -q PWNED "$dir.train"; then
    echo "FAIL: a name ran as code in $dir" >&2
    return 1
  fi
  sed -n 's/^\(step [0-9/]* | loss [^ ]*\).*/\1/p' "$dir.train"
}

# same WHAT PLAIN HOSTILE: the two runs' losses, equal to the last digit
same() {
  if [ -n "$2" ] && [ "$2" = "$3" ]; then
    echo "ok: $1: the same losses with hostile names"
  else
    echo "FAIL: $1: plain names gave"
    echo "$2"
    echo "  hostile names gave"
    echo "$3"
    fails=$((fails + 1))
  fi
}

# ---- the DSL: GPT-2 with every identifier a C keyword, macro or emitted name
dims=(-D B=2 -D T=8 -D C=32 -D L=2 -D NH=2 -D V=64)
hostile_dsl() {   # SRC OUT: examples/gpt2.mtc's names (and gpt_megatron.mtc's) made hostile
  sed -E -e 's/\bB\b/l/g; s/\bT\b/int/g; s/\bC\b/b/g; s/\bL\b/arena/g; s/\bNH\b/NULL/g' \
    -e 's/\bV\b/size_t/g; s/\bHS\b/forward/g; s/\bwte\b/_Bool/g; s/\bwpe\b/SIZE_MAX/g' \
    -e 's/\bln1_w\b/__attribute__/g; s/\bqkv_w\b/update/g; s/\bfc_b\b/Buffers/g' \
    -e 's/\blnf_w\b/rt_matmul/g; s/\blnf_b\b/mtc_model/g; s/\bidx\b/hb/g; s/^input targets:/input h:/; s/, targets\)/, h)/' \
    -e 's/\blogits\b/INT8_C/g; s/\bx\b/bind/g; s/\bq\b/_Generic/g; s/\by\b/main/g' \
    -e 's/\bKEEP\b/printf/g; s/\bp\b/rt_dropout/g' \
    -e 's/^model gpt2;/model l;/; s/^model gpt_megatron;/model l;/' "$1" > "$2"
}
hostile_dsl "$src/examples/gpt2.mtc" "$out/hostile.mtc"
plain=$(losses dsl_plain "$src/examples/gpt2.mtc" "${dims[@]}")
hostile=$(losses dsl_hostile "$out/hostile.mtc" -D l=2 -D int=8 -D b=32 -D arena=2 -D NULL=2 \
  -D size_t=64)
same "DSL GPT-2" "$plain" "$hostile"
# with every layer's activations swapped: the host buffers named after the values
# (NAME.swap, NAME.sw), bound in forward and backward
plain=$(losses dsl_plain_swap "$src/examples/gpt2.mtc" "${dims[@]}" --swap all)
hostile=$(losses dsl_hostile_swap "$out/hostile.mtc" -D l=2 -D int=8 -D b=32 -D arena=2 \
  -D NULL=2 -D size_t=64 --swap all)
same "DSL GPT-2, activations swapped" "$plain" "$hostile"
# with half of each shard's parameters in host memory: the buckets' host and device ranges,
# each copied into the gathered bucket (two copies an unshard), in bf16 with the host's copies
plain=$(losses dsl_plain_params "$src/examples/gpt2.mtc" "${dims[@]}" --offload 0.5 \
  --offload-params --precision bf16)
hostile=$(losses dsl_hostile_params "$out/hostile.mtc" -D l=2 -D int=8 -D b=32 -D arena=2 \
  -D NULL=2 -D size_t=64 --offload 0.5 --offload-params --precision bf16)
same "DSL GPT-2, half the parameters offloaded" "$plain" "$hostile"
# with bf16 gradients offloaded: the gradient buckets, their host copies and the model
# table's gradient type
plain=$(losses dsl_plain_grads16 "$src/examples/gpt2.mtc" "${dims[@]}" --offload-grads \
  --precision bf16 --grad-precision bf16)
hostile=$(losses dsl_hostile_grads16 "$out/hostile.mtc" -D l=2 -D int=8 -D b=32 -D arena=2 \
  -D NULL=2 -D size_t=64 --offload-grads --precision bf16 --grad-precision bf16)
same "DSL GPT-2, bf16 gradients offloaded" "$plain" "$hostile"

# ---- GPT as Megatron ran it: a causal softmax over the scores written out, and dropout (its
# masks keyed by the dropouts' order, not their names)
hostile_dsl "$src/examples/gpt_megatron.mtc" "$out/hostile_megatron.mtc"
plain=$(losses dsl_plain_megatron "$src/examples/gpt_megatron.mtc" "${dims[@]}")
hostile=$(losses dsl_hostile_megatron "$out/hostile_megatron.mtc" -D l=2 -D int=8 -D b=32 \
  -D arena=2 -D NULL=2 -D size_t=64)
same "DSL GPT as Megatron ran it (causal softmax, dropout)" "$plain" "$hostile"

# ---- the same on a 2 x 2 grid (Optimus 2D, 4 ranks): the params table's splits, the split
# norms' and tp kernels' axes and the loss's partial axes are emitted beside the names
if command -v mpirun > /dev/null; then
  plain=$(RANKS=4 losses dsl_plain_2d "$src/examples/gpt2.mtc" "${dims[@]}" --tp2d 2)
  hostile=$(RANKS=4 losses dsl_hostile_2d "$out/hostile.mtc" -D l=2 -D int=8 -D b=32 \
    -D arena=2 -D NULL=2 -D size_t=64 --tp2d 2)
  same "DSL GPT-2 on a 2 x 2 grid" "$plain" "$hostile"
fi

# ---- ONNX: PyTorch's GPT-2 export, every name hostile, in a file named with " \ and a newline
fix=$src/tests/fixtures/parity
evil=$out/$'q"x\\\n.onnx'
"$edit" names "$fix/gpt2/model_o17.onnx" "$evil"
plain=$(losses onnx_plain "$fix/gpt2/model_o17.onnx" -D B=4 -D T=16)
hostile=$(losses onnx_hostile "$evil" -D B=4 -D T=16)
same "ONNX GPT-2" "$plain" "$hostile"

# ---- ONNX with dims by name: Hugging Face GPT-2 exported with dynamic axes, B and T renamed
"$edit" names "$fix/hf_gpt2/model_o17_dyn.onnx" "$out/hf_dyn.onnx" B=l T=b
plain=$(losses hf_plain "$fix/hf_gpt2/model_o17_dyn.onnx" -D B=2 -D T=16)
hostile=$(losses hf_hostile "$out/hf_dyn.onnx" -D l=2 -D b=16)
same "HF GPT-2, dims l and b" "$plain" "$hostile"

# ---- the hostile ONNX program under ASan and UBSan: --save writes its names into JSON that
# parses (as UTF-8), --load and --dump-grads read and write them back, no sanitizer report
dir=$out/onnx_hostile
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
make -s -C "$dir" clean && make -s -C "$dir" cpu CFLAGS="-O1 -g -fopenmp -std=c11 -Wall -Werror $san" \
  > "$dir.asan.make" 2>&1 || { cat "$dir.asan.make"; echo "FAIL: the ASan build"; exit 1; }
(
  cd "$dir"
  export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
  ./train --steps 2 --save w.st --dump-grads g.st > save.log 2>&1 &&
    ./train --steps 1 --load w.st --save w2.st > load.log 2>&1 &&
    python3 -c 'import json, struct, sys
for path in sys.argv[1:]:
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    names = json.loads(b[8:8 + n].decode("utf-8"))
    assert {"a\\b", "q??/", "ctl\x01\x02", "\u00e9t\u00e9"} <= set(names), (path, list(names))' \
      w.st g.st w2.st
) || { cat "$dir"/*.log; echo "FAIL: the hostile program's safetensors"; fails=$((fails + 1)); }

[ "$fails" -eq 0 ] && echo "ok: hostile names change nothing"
exit $((fails > 0))
