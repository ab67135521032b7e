# The models and layouts of the distributed benchmarks (bench/dist.sh,
# bench/fidelity.sh), sourced: GPT-2 small (examples/gpt2.mtc's default
# config) and GPT-2 124M (vocabulary $vocab_124m), T=64, B=4 sequences per
# data-parallel rank; each layout as ranks|name|mtc compile flags, or (a mixed cluster's groups of
# one GPU each, dp x tp 1) groups=M0,M1/S0,S1[/Z[/R0,R1]]: each group's micro-batches of the
# model's B (or of R0 and R1 sequences: the model built with B=R0) and its share of the sharded
# state, under ZeRO-Z (default 1; under 2 or 3 a replica that runs fewer micro-batches joins the
# others' collectives with ghosts), compiled from a plan file (layout_flags).
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
  "1|ZeRO-3 offload 0.5 + params|--offload 0.5 --offload-params"
  "2|ZeRO-1 DP2, 2 micro-batches|groups=2,2/0.5,0.5"
  "2|ZeRO-1 DP2, batch 3:1, state 3:1|groups=3,1/0.75,0.25"
  "2|ZeRO-2 DP2, 2 micro-batches|groups=2,2/0.5,0.5/2"
  "2|ZeRO-2 DP2, batch 3:1, state 3:1|groups=3,1/0.75,0.25/2"
  "2|ZeRO-1 DP2, 2 micro-batches of 6 and 2|groups=2,2/0.5,0.5/1/6,2"
  "2|ZeRO-2 DP2, 2 micro-batches of 6 and 2|groups=2,2/0.5,0.5/2/6,2"
)

# The mtc compile flags of a layout for MTC and the model flags MFLAGS: LFLAGS as they are, or for
# groups=... --plan DIR/groups.json, the planner's plan for those groups edited to the layout.
layout_flags() {   # MTC "MFLAGS" LFLAGS DIR
  local mtc=$1 mflags=$2 lflags=$3 dir=$4
  case $lflags in groups=*) ;; *) echo "$lflags"; return ;; esac
  local spec=${lflags#groups=} micro state zero=1 rows=""
  micro=${spec%%/*} state=${spec#*/}
  case $state in */*/*) rows=${state##*/} state=${state%/*} ;; esac
  case $state in */*) zero=${state#*/} state=${state%/*} ;; esac
  # shellcheck disable=SC2086
  "$mtc" plan examples/gpt2.mtc --precision fp32 $mflags --gpus 2 --json "$dir/groups.json" \
    > /dev/null || return 1
  /usr/bin/python3 - "$dir/groups.json" "$micro" "$state" "$zero" "$rows" << 'EOF' || return 1
import json, re, sys
p = json.load(open(sys.argv[1]))
micro = [int(x) for x in sys.argv[2].split(",")]
state = [float(x) for x in sys.argv[3].split(",")]
b = p["dims"]["B"]
rows = [int(x) for x in sys.argv[5].split(",")] if sys.argv[5] else [b] * len(micro)
p["dims"]["B"] = rows[0]
p["batch"].update(micro=rows[0], micro_batches=sum(micro),
                  **{"global": sum(m * r for m, r in zip(micro, rows))})
g = p["groups"][0]
p["groups"] = [dict(g, name=f"g{i}", count=1, micro_batches=m, state_share=s, micro=r)
               for i, (m, s, r) in enumerate(zip(micro, state, rows))]
for k in p["blocks"]:
    k.update(dp=len(micro), tp=1, q=1, zero=int(sys.argv[4]), checkpoint=False, swap=False,
             offload=0, offload_grads=False, offload_params=False)
json.dump(p, open(sys.argv[1], "w"))
EOF
  echo "${rows:+-D B=${rows%%,*} }--plan $dir/groups.json"
}

# The sequences of a layout's global batch per step: B x dp (--dp), or B x the micro-batches of
# its groups (or each group's micro-batches times their size).
layout_batch() {   # LFLAGS B
  local dp micro
  case $1 in
  groups=*/*/*/*)   # each group's micro-batches of its own size
    awk -v m="$(cut -d/ -f1 <<< "${1#groups=}")" -v r="$(cut -d/ -f4 <<< "$1")" \
      'BEGIN { n = split(m, a, ","); split(r, b, ","); for (i = 1; i <= n; i++) s += a[i] * b[i]
               print s }' ;;
  groups=*) micro=${1#groups=}; micro=${micro%%/*}; echo $(( $2 * (${micro//,/+}) )) ;;
  *) dp=$(sed -n 's/.*--dp \([0-9]*\).*/\1/p' <<< "$1"); echo $(( $2 * ${dp:-1} )) ;;
  esac
}

