#!/usr/bin/env bash
# Bad input for multi-rank programs and --checkpoint: one clear message, a non-zero exit,
# nothing written.
#   tests/mpi_errors.sh MTC MODEL OUT
set -uo pipefail
mtc=$1 model=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$out"
mkdir -p "$out"
fails=0 passes=0
expect() { # NAME STATUS REGEX COMMAND...
  local name=$1 want=$2 re=$3
  shift 3
  local got
  got=$("$@" 2>&1)
  local rc=$?
  if [ "$rc" -eq "$want" ] && grep -qE -e "$re" <<< "$got"; then
    passes=$((passes + 1))
  else
    fails=$((fails + 1))
    echo "FAIL $name: exit $rc (want $want), output: $got"
  fi
}
expect tp_not_dividing 1 "NH = 4 heads do not divide by tp = 3.*give the block a tp that divides 4" \
  "$mtc" compile "$model" --tp 3 -o "$out/tp3"
[ -e "$out/tp3" ] && { echo "FAIL tp_not_dividing: $out/tp3 was written"; fails=$((fails + 1)); }
expect zero_stage 2 "--zero takes a stage 0, 1, 2 or 3" "$mtc" compile "$model" --zero 4 -o "$out/z"
expect dp_zero 2 "--dp takes a whole number from 1 to 65536" "$mtc" compile "$model" --dp 0 -o "$out/z"
expect plan_forced 2 "make plan price that one layout: --json, --svg, --dot and --formulas" \
  "$mtc" plan "$model" --dp 2 --json "$out/forced.json"
# plans that do not fit the model, applied with compile --plan: nothing is written
"$mtc" plan "$model" -D L=2 --gpus 4 --json "$out/plan.json" > /dev/null ||
  { echo "FAIL: mtc plan --json"; exit 1; }
edit() { # NAME PYTHON: plan.json edited by PYTHON (p is the plan) into NAME.json
  /usr/bin/python3 -c "import json; p = json.load(open('$out/plan.json')); $2; json.dump(p, open('$out/$1.json', 'w'))"
}
refused() { # NAME PYTHON REGEX OUT: plan.json edited by PYTHON, compiled: refused with REGEX,
            # OUT not written (checked below)
  edit "$1" "$2"
  expect "plan_$1" 1 "$3" "$mtc" compile "$model" -D L=2 --plan "$out/$1.json" -o "$out/$4"
}
grep -q '"seq_parallel":[[:space:]]*false' "$out/plan.json" ||
  { echo "FAIL: plan.json does not say \"seq_parallel\": false"; fails=$((fails + 1)); }
refused seq_parallel "p['seq_parallel'] = 'yes'" \
  "seq_parallel.json: \"seq_parallel\" must be true or false" p9
expect host_mem_bad 2 "--host-mem takes a size like 256GiB, or 0 for no offload, not 'lots'" \
  "$mtc" plan "$model" --gpus 4 --host-mem lots
expect host_mem_cluster 2 "--cluster .* leave out --gpus, --gpu, --device, --gpu-mem, --host-mem" \
  "$mtc" plan "$model" --cluster "$here/solver/mixed.json" --host-mem 0
refused two_meshes "p['blocks'][1]['tp'] = 2" \
  "block 0 \(rest\) is dp 4 x tp 1, another block dp 4 x tp 2: a program has one mesh for every block, where a block may also be data parallel over all 8 ranks" p1
# blocks below the mesh's tp (TP2 beside TP4): one degree for them all
refused sub_two_degrees "p['blocks'][0].update(dp=1, tp=8); p['blocks'][1].update(dp=2, tp=4); p['blocks'][2].update(dp=4, tp=2)" \
  "block 2 \(h.1\) is dp 4 x tp 2, another block dp 1 x tp 8: .* tensor parallel over a part of its tp \(one tp for those blocks, dividing 8, dp x tp = 8\)" p1
refused grid_and_sub "p['blocks'][0].update(dp=1, tp=4); p['blocks'][1].update(dp=2, tp=2); p['blocks'][2].update(dp=1, tp=1, q=2)" \
  "block 2 \(h.1\) is dp 1 x 2D 2x2, another block dp 1 x tp 4: .*or on 2D grids of its tp ranks \(q x q dividing 4, .*and q x q the tp of blocks over a part of tp\)" p1
# 2D on each group of 4 of 8 tp ranks: each micro-batch is split over the 2 grids' 4 rows, so
# its 2 sequences are too few (an 8-GPU plan with 8 heads, micro-batches of 2)
"$mtc" plan "$model" -D L=2 -D NH=8 -D B=2 --gpus 8 --json "$out/plan8.json" > /dev/null ||
  { echo "FAIL: mtc plan --gpus 8 --json"; exit 1; }
/usr/bin/python3 -c "import json; p = json.load(open('$out/plan8.json'))
for b in p['blocks']: b.update(dp=1, tp=8, q=1, zero=0) if b['id'] == 0 else b.update(dp=2, tp=1, q=2, zero=0)
json.dump(p, open('$out/subgrid_rows.json', 'w'))"
expect plan_subgrid_rows 1 "the 2D blocks on the 2 grids of 2 x 2 of the tp ranks split each micro-batch over the grids' 4 rows, and its 2 sequences do not divide by 4" \
  "$mtc" compile "$model" -D L=2 -D NH=8 -D B=2 --plan "$out/subgrid_rows.json" -o "$out/p_subgrid"
[ -e "$out/p_subgrid" ] && { echo "FAIL plan_subgrid_rows: $out/p_subgrid was written"; fails=$((fails + 1)); }
refused batch_tp_split "p['blocks'][1].update(tp=2, batch_tp=2)" \
  "blocks\[1\] \(h.0\): \"batch_tp\" 2: a block data parallel over the tp ranks of its mesh has tp 1, q 1 and dp all of the ranks" p1
refused grid_and_dp "p['blocks'][1].update(dp=1, q=2)" \
  "block 0 \(rest\) is dp 4 x tp 1, another block dp 1 x 2D 2x2: a program has one mesh" p1
refused uneven "p['groups'][0]['micro_batches'] = 3" \
  "groups\[0\] runs 3 micro-batches on 4 replicas: each replica of a group runs the same number" p11
refused uneven_sum "p['groups'][0]['micro_batches'] = 8" \
  "the groups run 8 micro-batches and \"batch\" says 4: make them equal" p11
refused share "[b.update(zero=1) for b in p['blocks']]; p['groups'][0]['state_share'] = 0.75" \
  "share.json: the groups' state shares add up to 0.75: make them add up to 1" p11
# a mixed cluster's groups (tests/mpi_plan.sh runs one): each replica in one group, each
# group's micro-batches whole per replica, each replica's part of the state whole units of at
# most 64
two="g = p['groups'][0]; p['groups'] = [dict(g, count=2, micro_batches=1, state_share=0.5), dict(g, count=2, micro_batches=3, state_share=0.5)]; [b.update(dp=2, tp=2) for b in p['blocks']]"
refused offload_grads_share "[b.update(offload=0.5, offload_grads=True) for b in p['blocks']]" \
  "blocks\[0\] \(rest\): \"offload_grads\" with \"offload\" 0.5: the gradients leave the device only with all of the optimizer state" p11
refused offload_grads_type "p['blocks'][0]['offload_grads'] = 1" \
  "blocks\[0\]: \"offload_grads\" must be true or false" p11
# activation swap in a plan file: true or false, not with checkpointing, the first S layers
refused swap_type "p['blocks'][1]['swap'] = 'yes'" \
  "blocks\[1\]: \"swap\" must be true or false" p11
refused swap_and_checkpoint "p['blocks'][1].update(swap=True, checkpoint=True)" \
  "blocks\[1\] \(h.0\): \"swap\" and \"checkpoint\": a block's activations are swapped to host memory or recomputed, not both" p11
refused swap_not_first "p['blocks'][2]['swap'] = True" \
  "the plan swaps block 2, not as one of the first S layers swapped and the K after them checkpointed" p11
refused swap_after_checkpoint "p['blocks'][1]['checkpoint'] = True; p['blocks'][2]['swap'] = True" \
  "the plan swaps block 2, not as one of the first S layers swapped" p11
refused groups_share "$two; [b.update(zero=1) for b in p['blocks']]; p['groups'][0]['state_share'] = 0.31; p['groups'][1]['state_share'] = 0.69" \
  "groups_share.json: the groups' state shares \(0.31, 0.69\) do not split into whole parts of at most 64 units for their replicas: give each replica a fraction with a denominator of 64 or less" p11
refused groups_share_tp "$two; [b.update(zero=1) for b in p['blocks']]; p['blocks'][1]['batch_tp'] = 2; p['blocks'][1].update(dp=4, tp=1); p['groups'][0]['state_share'] = 0.25; p['groups'][1]['state_share'] = 0.75" \
  "block 1 splits its batch over tp, and the replicas hold uneven parts of the state, which is not lowered yet" p11
refused groups_rows "$two; p['groups'][0]['micro'] = 3" \
  "groups\[0\] runs micro-batches of 3 sequences and \"batch\" says 4: \"batch\"'s \"micro\" is the first group's" p11
refused groups_replica "$two; p['groups'][0]['count'] = 1; p['groups'][1]['count'] = 3" \
  "groups\[0\] has 1 GPUs; a replica of the mesh dp 2 x tp 2 takes 2, all in one group" p11
refused groups_few "$two; [b.update(dp=4, tp=1) for b in p['blocks']]; p['groups'][0].update(count=1, micro_batches=2); p['groups'][1].update(count=3, micro_batches=2)" \
  "groups\[1\] runs 2 micro-batches on 3 replicas: each replica of a group runs the same number, at least 1" p11
refused groups_count "$two; p['groups'][1]['count'] = 4" \
  "the groups have 6 GPUs, the blocks' mesh dp 2 x tp 2 runs on 4" p11
refused no_block "p['blocks'][1]['id'] = 9" \
  "block 9 does not exist: the model has blocks 0 to 2" p2
refused missing "del p['blocks'][2]" \
  "block 2 \(h.1\) has no entry in \"blocks\"" p3
expect plan_dims 1 "the plan is for L = 2, the model has L = 4: compile with -D L=2, or plan again" \
  "$mtc" compile "$model" -D L=4 --plan "$out/plan.json" -o "$out/p3"
refused renamed "p['blocks'][2]['name'] = 'h.7'" \
  "block 2 of this model is \"h.1\", not \"h.7\": the plan is for another model" p8
refused grid_tp "[b.update(dp=1, tp=2, q=2) for b in p['blocks']]" \
  "blocks\[0\] \(rest\): tp 2 and q 2: a block is split over tp ranks or over a q x q grid, not both" p4
expect tp2d_heads 1 "attention in block 1: its NH = 4 heads do not divide by q = 3 .*give the block a q that divides 4" \
  "$mtc" compile "$model" -D B=6 --tp2d 3 -o "$out/p4"
expect tp2d_batch 1 "the batch dim B = 4 of 'idx' does not divide by q = 3" \
  "$mtc" compile "$model" --tp2d 3 -o "$out/p4"
expect tp2d_and_tp 2 "--tp 2 --tp2d 2: a replica is split over tp ranks .* or over a q x q grid .*, not both" \
  "$mtc" compile "$model" --tp 2 --tp2d 2 -o "$out/p4"
# --layers-dp: with --tp, on a model with repeated layers
expect layers_dp_no_tp 2 "--layers-dp makes the repeated layers data parallel over the tp ranks too, beside the tensor-parallel rest: give --tp 2 or more" \
  "$mtc" compile "$model" --dp 2 --layers-dp -o "$out/p4"
expect layers_dp_no_layers 1 "--layers-dp: the model has no repeated layers" \
  "$mtc" compile "$here/../examples/mlp.mtc" --tp 2 --layers-dp -o "$out/p4"
# ... and splits the micro-batch over the tp ranks: they must divide it (as over tp / S ranks for
# --layers-tp S)
expect layers_dp_batch 1 "block 1 splits its micro-batch of 2 sequences over 4 parts of the tp ranks, which do not divide it: give a micro-batch that 4 divides" \
  "$mtc" compile "$model" -D B=2 --tp 4 --layers-dp -o "$out/p4"
expect layers_tp_batch 1 "block 1 splits its micro-batch of 3 sequences over 2 parts" \
  "$mtc" compile "$model" -D B=3 --tp 4 --layers-tp 2 -o "$out/p4"
[ -e "$out/p4" ] && { echo "FAIL layers_dp_batch: $out/p4 was written"; fails=$((fails + 1)); }
# --layers-tp S: S divides --tp and is below it
expect layers_tp_3 2 "--layers-tp 3 makes the repeated layers tensor parallel over 3 of the --tp ranks: give --tp a multiple of it, above it" \
  "$mtc" compile "$model" --tp 4 --layers-tp 3 -o "$out/p4"
expect layers_tp_equal 2 "--layers-tp 2 makes the repeated layers tensor parallel over 2 of the --tp ranks" \
  "$mtc" compile "$model" --tp 2 --layers-tp 2 -o "$out/p4"
expect layers_tp_no_layers 1 "--layers-tp: the model has no repeated layers" \
  "$mtc" compile "$here/../examples/mlp.mtc" --tp 4 --layers-tp 2 -o "$out/p4"
# a plan of a 2D grid (every block q 2 on the plan's 4 GPUs) compiles and says so
edit grid "[b.update(dp=1, tp=1, q=2) for b in p['blocks']]"
if "$mtc" compile "$model" -D L=2 --plan "$out/grid.json" -o "$out/grid" > "$out/grid.log" 2>&1 &&
    grep -q '"dp 1 x 2D 2x2' "$out/grid/model.c"; then
  passes=$((passes + 1))
else
  fails=$((fails + 1))
  echo "FAIL plan_grid: a plan of 2D grids does not compile to dp 1 x 2D 2x2:"
  cat "$out/grid.log"
fi
refused tp3 "[b.update(dp=1, tp=3) for b in p['blocks']]; p['batch']['micro_batches'] = 3; p['groups'][0]['count'] = 3; p['groups'][0]['micro_batches'] = 3" \
  "NH = 4 heads do not divide by tp = 3" p5
expect plan_batch 1 "the plan is for B = 4, the model has B = 2: compile with -D B=4, or plan again" \
  "$mtc" compile "$model" -D L=2 -D B=2 --plan "$out/plan.json" -o "$out/p6"
expect plan_and_dp 2 "--plan .* is a layout for compile: leave out --dp" \
  "$mtc" compile "$model" --plan "$out/plan.json" --dp 2 -o "$out/p7"
expect plan_precision 1 "the plan is for bf16 and this program would be fp32: compile with --precision bf16" \
  "$mtc" compile "$model" -D L=2 --plan "$out/plan.json" --precision fp32 -o "$out/p10"
refused precision_bad "p['precision'] = 'fp8'" \
  "\"precision\" must be \"bf16\" or \"fp32\"" p10
# the gradients' precision: the plan's (float32 where a file has no such field) or none
expect plan_grad_precision 1 "the plan's gradients are fp32 and this program's would be bf16: compile with --grad-precision fp32" \
  "$mtc" compile "$model" -D L=2 --plan "$out/plan.json" --grad-precision bf16 -o "$out/p10"
refused grad_precision_bad "p['grad_precision'] = 'fp16'" \
  "\"grad_precision\" must be \"bf16\" or \"fp32\"" p10
expect grad_precision_fp32 2 "--grad-precision bf16 keeps the gradients of bf16 mixed precision in bf16" \
  "$mtc" compile "$model" --precision fp32 --grad-precision bf16 -o "$out/p10"
for p in p1 p2 p3 p4 p5 p6 p7 p8 p9 p10 p11; do
  [ -e "$out/$p" ] && { echo "FAIL: $out/$p was written"; fails=$((fails + 1)); }
done
# --checkpoint none|all|K: K a number of layers, at most the model's (gpt2 -D L=2: 2)
for bad in 0 -1 1.5 some ""; do
  expect "checkpoint_'$bad'" 2 "--checkpoint takes none, all or a number of layers K >= 1, not '$bad'" \
    "$mtc" compile "$model" --checkpoint "$bad" -o "$out/ck"
done
expect checkpoint_missing 2 "--checkpoint needs a value" "$mtc" compile "$model" -o "$out/ck" --checkpoint
expect checkpoint_too_many 1 "--checkpoint 3, but the model has 2 repeated layers \(use 1 to 2" \
  "$mtc" compile "$model" -D L=2 --dp 2 --checkpoint 3 -o "$out/ck"
# --swap none|all|S likewise; --checkpoint then counts the layers after the swapped ones
for bad in 0 -2 x ""; do
  expect "swap_'$bad'" 2 "--swap takes none, all or a number of layers K >= 1, not '$bad'" \
    "$mtc" compile "$model" --swap "$bad" -o "$out/ck"
done
expect swap_too_many 1 "swap: --swap 3, but the model has 2 repeated layers \(use 1 to 2" \
  "$mtc" compile "$model" -D L=2 --swap 3 -o "$out/ck"
expect swap_then_checkpoint 1 "recompute: --checkpoint 2 after 1 swapped layer, but the model has 2 repeated layers" \
  "$mtc" compile "$model" -D L=2 --dp 2 --swap 1 --checkpoint 2 -o "$out/ck"
expect swap_no_layers 1 "swap: the model has no repeated layers" \
  "$mtc" compile "$(dirname "$0")/../examples/mlp.mtc" --swap all -o "$out/ck"
expect checkpoint_plan 2 "make plan price that one layout" "$mtc" plan "$model" --checkpoint all \
  --svg "$out/ck.svg"
[ -e "$out/ck" ] && { echo "FAIL checkpoint: $out/ck was written"; fails=$((fails + 1)); }
for bad in 1.5 -0.1 abc nan ""; do
  expect "offload_$bad" 2 "--offload takes a share of the optimizer state from 0 to 1, not '$bad'" \
    "$mtc" compile "$model" --dp 2 --offload "$bad" -o "$out/off"
done
expect offload_grads_share 2 "--offload-grads moves every gradient, and all of the optimizer state with it: leave out --offload 0.5, or make it 1" \
  "$mtc" compile "$model" --dp 2 --offload 0.5 --offload-grads -o "$out/off"
expect offload_grads_sgd 1 "offloads its gradients, and SGD has no optimizer state to offload with them" \
  "$mtc" compile "$model" --dp 2 --offload-grads --optimizer sgd -o "$out/off"
expect offload_missing 2 "--offload needs a value" "$mtc" compile "$model" -o "$out/off" --offload
[ -e "$out/off" ] && { echo "FAIL offload: $out/off was written"; fails=$((fails + 1)); }
# a program for 2 ranks started on 1 (no mpirun), and on 3
"$mtc" compile "$model" -D L=1 --dp 2 -o "$out/dp2" > /dev/null && make -s -C "$out/dp2" cpu > /dev/null 2>&1 ||
  { echo "FAIL: cannot build the dp 2 program"; exit 1; }
expect one_process 1 "compiled for 2 ranks.*mpirun -np 2" "$out/dp2/train" --steps 1
if command -v mpirun > /dev/null; then
  expect wrong_n 1 "compiled for 2 ranks.*mpirun -np 2" "$here/mpirun.sh" 3 "$out/dp2/train" --steps 1
fi
# the Makefile of a multi-rank program says what to install when mpicc is missing
expect no_mpicc 2 "needs MPI: apt-get install" make -s -C "$out/dp2" -B cpu CC=/nonexistent/mpicc
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
