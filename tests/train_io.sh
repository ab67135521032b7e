#!/usr/bin/env bash
# The emitted program's safetensors flags, end to end on examples/mlp.mtc:
#   --save / --load   3 SGD steps, save, 3 more from the saved weights = 6 steps
#   --inputs          a batch with int64 labels trains exactly as with int32 ones
#   --dump-grads      one tensor per parameter, named and shaped as the parameter
#   errors            each bad file or flag fails with a message naming the problem; numeric
#                     settings are checked after their conversion to float32 or int
#   schedule          --lr-schedule/--warmup/--lr-min: the rate printed per step and used
#   targets           --save of a symlink, a folder or a FIFO fails before training and
#                     leaves it; a stale temporary (its process gone) is removed at start
#
#   train_io.sh MTC MODEL OUTDIR
# Exits 77 (ctest: skipped) when numpy is missing (it writes the test inputs).
set -euo pipefail
mtc=$1 model=$2 out=$3
# shellcheck source=tests/numpy.sh
source "$(dirname "$0")/numpy.sh"
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"

rm -rf "$out"
"$mtc" compile "$model" -o "$out" -D B=8 -D D=16 -D H=32 -D K=10
make_program "$out" "-O2 -fopenmp -std=c11 -Wall -Wextra -Werror"
cd "$out"

# the test inputs: a good batch (int32 and int64 labels) and broken ones
"$python" - "$tools" << 'EOF'
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from parity_check import st_write
rng = np.random.default_rng(1)
x = rng.standard_normal((8, 16)).astype(np.float32)
y = rng.integers(0, 10, 8)
st_write("in_i32.safetensors", {"x": x, "y": y.astype(np.int32)})
st_write("in_i64.safetensors", {"y": y.astype(np.int64), "x": x, "extra": x})
st_write("no_y.safetensors", {"x": x})
st_write("bad_shape.safetensors", {"x": x.reshape(16, 8), "y": y.astype(np.int32)})
st_write("bad_f64.safetensors", {"x": x.astype(np.float64), "y": y.astype(np.int32)})
st_write("bad_float_y.safetensors", {"x": x, "y": y.astype(np.float32)})
big = y.copy(); big[3] = 1 << 40
st_write("bad_i64.safetensors", {"x": x, "y": big})
out = y.copy(); out[5] = 10
st_write("bad_range.safetensors", {"x": x, "y": out.astype(np.int32)})
blob = open("in_i32.safetensors", "rb").read()
open("truncated.safetensors", "wb").write(blob[:-5])
EOF

# --save / --load: 3 + 3 SGD steps are the 6 steps of one run, bit for bit
./train --optimizer sgd --lr 0.1 --steps 6 > six.log
./train --optimizer sgd --lr 0.1 --steps 3 --save w.safetensors > first.log
grep -q "^wrote w.safetensors: weights, 6 tensors" first.log || fail "--save did not report"
./train --optimizer sgd --lr 0.1 --steps 3 --load w.safetensors > second.log
[ "$(losses six.log | tail -3)" = "$(losses second.log)" ] ||
  fail "--load of the saved weights does not continue the run: $(losses six.log | tr '\n' ' ') vs $(losses second.log | tr '\n' ' ')"

# --inputs: int64 labels (and an unused tensor, with a note) train as int32 ones
./train --inputs in_i32.safetensors --steps 3 > i32.log
./train --inputs in_i64.safetensors --steps 3 > i64.log 2> i64.err
[ "$(losses i32.log)" = "$(losses i64.log)" ] || fail "int64 and int32 labels train differently"
grep -q "ignoring tensor 'extra'" i64.err || fail "no note about the unused tensor 'extra'"
[ "$(losses i32.log)" != "$(losses six.log | head -3)" ] || fail "--inputs did not change the batch"

# --dump-grads: every parameter by name and shape; --lr 0 leaves the weights as they were
./train --inputs in_i32.safetensors --steps 2 --lr 0 --dump-grads g.safetensors > g.log
[ "$(losses g.log | sed -n 1p)" = "$(losses g.log | sed -n 2p)" ] || fail "--lr 0 changed the loss"
"$python" - "$tools" << 'EOF' || fail "--dump-grads wrote the wrong tensors"
import sys
sys.path.insert(0, sys.argv[1])
from parity_check import st_read
g = st_read("g.safetensors")
want = {"w1": (16, 32), "b1": (32,), "ln_w": (32,), "ln_b": (32,), "w2": (32, 10), "b2": (10,)}
got = {k: v.shape for k, v in g.items()}
assert got == want, got
assert all(abs(v).max() > 0 for v in g.values()), "a zero gradient"
EOF

# errors: exit status 1 (2 for the command line) and a message that names the problem
expect() {  # expect STATUS TEXT train-args...
  local status=$1 text=$2
  shift 2
  expect_exit "$status" "$text" ./train --steps 1 "$@"
  echo "ok: train $* -> $text"
}
expect 1 "no tensor named 'y' (the model's input" --inputs no_y.safetensors
expect 1 "tensor 'x' has shape [16, 8], the model's input expects [8, 16]" --inputs bad_shape.safetensors
expect 1 "tensor 'x' is F64; the model's input is float32: expected F32 or BF16" --inputs bad_f64.safetensors
expect 1 "tensor 'y' is F32; the model's input is int32: expected I32 or I64" --inputs bad_float_y.safetensors
expect 1 "element 3 is 1099511627776, which does not fit in int32" --inputs bad_i64.safetensors
expect 1 "element 5 is 10, outside [0, 10)" --inputs bad_range.safetensors
expect 1 "--inputs: truncated.safetensors: tensor 'y': data_offsets [512, 544] run past the end" \
  --inputs truncated.safetensors
expect 1 "--inputs: cannot open missing.safetensors" --inputs missing.safetensors
expect 1 "--load in_i32.safetensors: no tensor named 'w1' (the model's parameter" --load in_i32.safetensors
expect 1 "--save no/such/dir/w.safetensors: cannot write into the folder no/such/dir" \
  --save no/such/dir/w.safetensors
expect 2 "--data and --inputs exclude each other" --data x.bin --inputs in_i32.safetensors
# settings are checked after their conversion to float32 and int
expect 2 "--lr expects a number in [0, 3.40282e+38], got '1e39', which is infinite in float32" \
  --lr 1e39
expect 2 "--beta2 expects a number in [0, 1), got '0.99999999999', which is 1 in float32" \
  --beta2 0.99999999999
expect 2 "--eps expects a number in [0, 3.40282e+38], got '1e-50', which is 0 in float32" \
  --eps 1e-50
expect 2 "--weight-decay expects a number in [0, 3.40282e+38], got 'nan'" --weight-decay nan
expect 2 "--seed expects an integer in [0, 18446744073709551615], got ' -1'" --seed " -1"
expect 2 "--seed expects an integer in [0, 18446744073709551615], got '18446744073709551616'" \
  --seed 18446744073709551616
expect 2 "--steps expects an integer in [0, 2147483647], got '2147483648'" --steps 2147483648
expect 2 "--log-every expects an integer in [1, 2147483647], got '0x10'" --log-every 0x10
MTC_HOST_THREADS=1000 expect 2 "MTC_HOST_THREADS expects an integer in [1, 256]"
# --save and --dump-grads refuse, before the first step, what is not a regular file, and leave it
# the learning-rate schedule: the printed rate per step, and the rate reaches the update (a
# warmup of 2 to 0.02 takes its first step at 0.01, as a constant 0.01 does: the same second loss)
./train --steps 6 --log-every 1 --optimizer sgd --lr 0.02 --lr-schedule cosine --warmup 2 \
  --lr-min 0.002 > sched.out
lrs=$(sed -n 's/^step.*| lr \([^ |]*\).*$/\1/p' sched.out | tr '\n' ' ')
# steps 1-2 warm up; steps 3-6 decay, p = 1/4, 1/2, 3/4, 1 (%.4g as printed)
[ "$lrs" = "0.01 0.02 0.01736 0.011 0.004636 0.002 " ] || fail "scheduled rates: $lrs"
./train --steps 2 --log-every 1 --optimizer sgd --lr 0.01 > const.out
[ "$(losses sched.out | sed -n 2p)" = "$(losses const.out | sed -n 2p)" ] ||
  fail "the warmup's first rate did not reach the update: $(losses sched.out | head -2) vs $(losses const.out)"
expect 2 "--lr-schedule expects constant, linear or cosine, got 'step'" --lr-schedule step
expect 2 "--lr-min 0.5 is above --lr 0.1: a decay ends below where it starts" --lr 0.1 \
  --lr-schedule linear --lr-min 0.5
expect 2 "--lr-min is the end of a decay: give --lr-schedule linear or cosine" --lr-min 0.001
expect 2 "--warmup expects an integer in [0, 2147483647]" --warmup -1
echo "ok: the learning-rate schedule"
# the gradient norm each step prints is that of the gradients (--dump-grads), before clipping;
# --grad-clip above it changes nothing, and one at a quarter of it scales the first SGD step
# as a quarter of the rate does (the second loss, to print precision)
norm() { sed -n 's/^step.*| norm \([0-9.]*\) |.*$/\1/p' "$1" | sed -n "${2}p"; }
./train --inputs in_i32.safetensors --optimizer sgd --lr 0.5 --steps 2 --dump-grads g1.st > plain.out
n1=$(norm plain.out 1)
"$python" - "$tools" g1.st "$n1" << 'EOF'
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from parity_check import st_read
grads = st_read(sys.argv[2])
want = float(np.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads.values())))
got = float(sys.argv[3])
assert abs(got - want) <= 1e-4 * want + 5e-5, f"printed norm {got}, the gradients' {want}"
EOF
./train --inputs in_i32.safetensors --optimizer sgd --lr 0.5 --steps 2 --grad-clip 1e6 > loose.out
[ "$(losses loose.out)" = "$(losses plain.out)" ] || fail "--grad-clip above the norm changed the losses"
clip=$("$python" -c "import sys; print(float(sys.argv[1]) / 4)" "$n1")
./train --inputs in_i32.safetensors --optimizer sgd --lr 0.5 --steps 2 --grad-clip "$clip" > clip.out
./train --inputs in_i32.safetensors --optimizer sgd --lr 0.125 --steps 2 > quarter.out
[ "$(norm clip.out 1)" = "$n1" ] || fail "the clipped run printed norm $(norm clip.out 1), not $n1"
"$python" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); assert abs(a - b) <= 1e-4 * abs(b), (a, b)" \
  "$(losses clip.out | sed -n 2p)" "$(losses quarter.out | sed -n 2p)" ||
  fail "clipping to a quarter of the norm is not a quarter of the step"
[ "$(losses clip.out | sed -n 2p)" != "$(losses plain.out | sed -n 2p)" ] || fail "--grad-clip did nothing"
expect 2 "--grad-clip expects a number in [0, 3.40282e+38], got '-1'" --grad-clip -1
echo "ok: the gradient norm and clipping"
# --log: a JSON line per step whatever --log-every, each as its step line says; a file it cannot
# write stops the program before the first step
./train --inputs in_i32.safetensors --optimizer sgd --lr 0.5 --steps 3 --log-every 2 \
  --log run.jsonl > logged.out
"$python" - run.jsonl logged.out << 'EOF'
import json, re, sys
recs = [json.loads(line) for line in open(sys.argv[1])]
assert [r["step"] for r in recs] == [1, 2, 3] and all(r["steps"] == 3 for r in recs), recs
assert all(r["kind"] == "train" and r["ms"] > 0 and r["tokens_per_s"] > 0 for r in recs), recs
matched = 0
for line in open(sys.argv[2]):
    m = re.match(r"step (\d+)/3 \| loss (\S+) \|.*\| lr (\S+) \| norm (\S+) \| ETA \S+$", line.strip())
    if m:
        matched += 1
        r = recs[int(m.group(1)) - 1]
        assert f"{r['loss']:.6f}" == m.group(2), (r, line)
        assert f"{r['lr']:.4g}" == m.group(3) and f"{r['grad_norm']:.4f}" == m.group(4), (r, line)
assert matched == 2, f"{matched} step lines of the form 'step n/3 | ... | norm X | ETA T'"
EOF
[ "$(grep -c '^step' logged.out)" -eq 2 ] || fail "--log changed what the program prints"
expect 1 "--log no/such/dir/run.jsonl: cannot write it: No such file or directory" \
  --log no/such/dir/run.jsonl
! grep -q "^step" <<< "$expect_said" || fail "an unwritable --log was found only after training"
echo "ok: --log"
ln -sf w.safetensors link.safetensors && mkdir -p folder && rm -f fifo && mkfifo fifo
expect 1 "--save link.safetensors: is a symbolic link" --save link.safetensors
expect 1 "--save folder: is a folder" --save folder
expect 1 "--dump-grads fifo: is a FIFO, not a regular file" --dump-grads fifo
! grep -q "^step" <<< "$expect_said" || fail "a refused --save target was found only after training"
[ -L link.safetensors ] && [ -p fifo ] && [ -d folder ] || fail "a refused target was replaced"
# a temporary of a save killed before its rename (its process gone) is removed at start
sh -c 'exit 0' & dead=$!
wait $dead
touch ".w.safetensors.mtc-tmp.$(hostname).$dead"
./train --steps 1 --save w.safetensors > /dev/null 2> stale.err
grep -q "removed 1 temporary file of a save that did not finish" stale.err ||
  fail "the stale temporary was not removed: $(cat stale.err)"
ls -a | grep -q "mtc-tmp" && fail "a temporary file was left behind"
# --init-from: the parameters the file has over the initial ones; a transposed matrix (GPT-2's
# Conv1D) transposed; the others as initialized; extra tensors noted
./train --steps 1 --lr 0 --optimizer sgd --save init.safetensors > /dev/null
"$python" - "$tools" << 'EOF'
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from parity_check import st_write
rng = np.random.default_rng(3)
w1 = rng.standard_normal((16, 32)).astype(np.float32)   # the model's [D, H]
b1 = rng.standard_normal(32).astype(np.float32)
st_write("hf.safetensors", {"w1": np.ascontiguousarray(w1.T), "b1": b1, "unused": b1})
np.save("w1.npy", w1), np.save("b1.npy", b1)
EOF
./train --init-from hf.safetensors --steps 1 --lr 0 --optimizer sgd --save from.safetensors > from.out 2>&1
grep -q -- "--init-from hf.safetensors: 2 parameters (1 of them transposed); 4 not in the file keep their initial values: 'ln_w', 'ln_b', 'w2', 'b2'" from.out ||
  fail "--init-from: $(cat from.out)"
"$python" - "$tools" << 'EOF'
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from parity_check import st_read
got, init = st_read("from.safetensors"), st_read("init.safetensors")
assert np.array_equal(got["w1"], np.load("w1.npy")) and np.array_equal(got["b1"], np.load("b1.npy"))
for name in ("ln_w", "ln_b", "w2", "b2"):
    assert np.array_equal(got[name], init[name]), name
EOF
expect 2 "--init-from and --load exclude each other" --init-from hf.safetensors --load init.safetensors
echo "ok: train --save, --load, --init-from, --inputs, --dump-grads and their errors"
