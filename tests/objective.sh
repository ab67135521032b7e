#!/usr/bin/env bash
# The training objective --data gives a causal LM: on a stream where every
# token comes twice in a row (a a b b c c ..., the pairs uniform over the
# vocabulary V), a model trained on the next token reaches the ideal loss
# ln(V)/2 (the second of a pair is certain, the first is chance); one fed
# targets that its own loss shifts again learns the token two ahead and stays
# at chance, ln(V). mtc decides from the graph whether a model shifts its
# labels itself (Hugging Face's causal LMs do) and feeds them accordingly.
#
#   tests/objective.sh MTC MODEL OUT STEPS T [MTC ARGS...]   (compiled with -D T=T)
#
# Passes when the mean loss of the last 20 of STEPS steps is within 2% of the
# ideal: ln(V) times the share of the predictions whose target is the first
# of a pair, V the model's vocabulary (the range of its token input); a row
# of T tokens starts with a pair. With next-token targets the model predicts
# T targets, half of them firsts; a model that shifts its labels predicts
# T - 1 of them, T/2 - 1 firsts. OBJECTIVE_LR (default 3e-3) is AdamW's
# learning rate, OBJECTIVE_TOL (default 0.02) the tolerance.
set -euo pipefail
mtc=$1 model=$2 out=$3 steps=$4 T=$5
shift 5
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
rm -rf "$out"
mkdir -p "$out"
build_program "$mtc" "$model" "$out/prog" "$out/compile.log" -D T="$T" "$@"
grep -- "--data feeds" "$out/compile.log"
shifts=0
grep -q "labels the model shifts itself" "$out/compile.log" && shifts=1
vocab=$(/usr/bin/python3 - "$out/prog/model.c" <<'PY'
import re, sys
# the token input's range: the model table's RT_IN_TOKENS row
for line in open(sys.argv[1]):
    if "RT_IN_TOKENS" in line:
        print(line.split("RT_IN_TOKENS,")[1].split(",")[0].strip())
        break
PY
)
[ -n "$vocab" ] || { echo "FAIL: no token input in $model"; exit 1; }
# an llm.c shard: 256 int32 header (magic, version, count), then uint16 tokens
/usr/bin/python3 - "$out/pairs.bin" "$vocab" <<'PY'
import random, struct, sys
path, v = sys.argv[1], int(sys.argv[2])
rng = random.Random(20261127)
toks = []
while len(toks) < 1 << 18:
    t = rng.randrange(v)
    toks += [t, t]
with open(path, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
    f.write(struct.pack(f"<{len(toks)}H", *toks))
PY
# --no-shuffle: the windows in order, as the step counts were calibrated on. The copying this data
# rewards is learned in a jump off a plateau whose timing depends on the order: HF Llama at
# lr 1e-2 leaves it by step 750 in order, and by step 1000-1500 with three shuffled orders.
(cd "$out/prog" && ./train --data "$out/pairs.bin" --no-shuffle --steps "$steps" --optimizer adamw --lr "${OBJECTIVE_LR:-3e-3}" \
  --log-every 1 > "$out/train.log")
/usr/bin/python3 - "$out/train.log" "$vocab" "$T" "$shifts" <<'PY'
import math, os, re, sys
losses = [float(m.group(1)) for m in map(re.compile(r"^step \d+(?:/\d+)? \| loss ([-0-9.eE+naninf]+)").match,
                                          open(sys.argv[1])) if m]
v, t, shifts = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
share = (t / 2 - 1) / (t - 1) if shifts else 0.5
ideal, chance = share * math.log(v), math.log(v)
last = sum(losses[-20:]) / len(losses[-20:])
tol = float(os.environ.get("OBJECTIVE_TOL", "0.02"))
ok = abs(last - ideal) <= tol * ideal
print(f"{'ok  ' if ok else 'FAIL'} mean loss of the last 20 steps {last:.4f}; ideal {share:.4f} ln(V) = "
      f"{ideal:.4f}, chance ln(V) = {chance:.4f} (V = {v}); first loss {losses[0]:.4f}")
sys.exit(0 if ok else 1)
PY
