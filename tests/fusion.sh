#!/usr/bin/env bash
# fusion.sh MTC MODEL "OP=N ..." [MTC ARGS...]: after the fusion pass, MODEL's
# forward holds exactly N nodes of each OP named (N = 0: the pattern's parts
# are all gone). The fusions on models as exporters write them.
set -euo pipefail
mtc=$1 model=$2 want=$3
shift 3
ir=$("$mtc" inspect "$model" --dump-after fusion "$@")
status=0
for kv in $want; do
  op=${kv%=*} n=${kv#*=}
  got=$(grep -c "= $op(" <<< "$ir" || true)
  if [ "$got" != "$n" ]; then
    echo "FAIL: $model: $got '$op' nodes after fusion, want $n"
    status=1
  else
    echo "ok   $op: $got"
  fi
done
[ $status = 0 ] || grep -E "^  %" <<< "$ir" | sed 's/ @".*//' | head -80
exit $status
