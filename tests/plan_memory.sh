#!/usr/bin/env bash
# `mtc plan` and `mtc compile` of the same model and layout describe the same
# program: for each case below, `mtc plan --json` writes a plan, `mtc compile
# --plan` compiles it (its folder's plan.json must keep the layout and the
# memory per GPU), and the program, run on its ranks, must hold on every rank
# the model state on the device and in host memory that the plan reports
# (params + grads + optimizer; host_bytes), to the byte.
#
#   tests/plan_memory.sh MTC MODEL OUT [MTC ARGS...]
#
# The cases: each the planner's own choice for 4 GPUs of less and less memory
# (--gpu-mem), named by what it chooses for tests/CMakeLists.txt's model
# (dims whose tensors the buckets pad: C=40, V=252, which bf16 pads to 256):
# bf16 (the default) data parallel, ZeRO-2, ZeRO-2 with offload, dp 2 x tp 2
# with offload, and with the gradients offloaded too; fp32 ZeRO-2 with offload.
set -euo pipefail
mtc=$1 model=$2 out=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
rm -rf "$out"
mkdir -p "$out"
export OMP_NUM_THREADS=1
cases=(
  "dp|"
  "zero2|--gpu-mem 600KB --host-mem 10MB"
  "zero2_offload|--gpu-mem 500KB --host-mem 10MB"
  "dp2_tp2_offload|--gpu-mem 240KB --host-mem 10MB"
  "dp2_tp2_offload_grads|--gpu-mem 220KB --host-mem 10MB"
  "fp32_zero2_offload|--gpu-mem 700KB --host-mem 10MB --precision fp32"
)
ok=0
for c in "${cases[@]}"; do
  name=${c%%|*}
  read -r -a flags <<< "${c#*|}"
  d=$out/$name
  mkdir -p "$d"
  "$mtc" plan "$model" "$@" --gpus 4 "${flags[@]}" --json "$d/plan.json" > "$d/plan.txt"
  # the plan's precision (compile refuses another)
  prec=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["precision"])' \
    "$d/plan.json")
  build_program "$mtc" "$model" "$d/prog" "$d/compile.log" "$@" --precision "$prec" \
    --plan "$d/plan.json"
  set +e
  "$here/mpirun.sh" 4 "$d/prog/train" --steps 1 > "$d/run.log" 2> "$d/run.err"
  rc=$?
  set -e
  [ $rc -eq 77 ] && { cat "$d/run.log"; exit 77; }
  [ $rc -eq 0 ] || { echo "FAIL: $name: the program exited with $rc"; cat "$d/run.log" "$d/run.err"; exit 1; }
  /usr/bin/python3 - "$name" "$d/plan.json" "$d/prog/plan.json" "$d/run.log" <<'PY' || ok=1
import json, re, sys
name, planned, compiled, log = sys.argv[1:]
p, c = json.load(open(planned)), json.load(open(compiled))
bad = []
keys = ("dp", "tp", "q", "zero", "checkpoint", "offload", "offload_grads")
lp = [{k: b[k] for k in keys} for b in p["blocks"]]
lc = [{k: b[k] for k in keys} for b in c["blocks"]]
if lp != lc:
    bad.append(f"layouts differ: plan {lp}, compile {lc}")
if p["precision"] != c["precision"]:
    bad.append(f"precision: plan {p['precision']}, compile {c['precision']}")
gp, gc = p["groups"][0], c["groups"][0]
if gp["memory"] != gc["memory"] or gp["host_bytes"] != gc["host_bytes"]:
    bad.append(f"memory: plan {gp['memory']} {gp['host_bytes']}, compile {gc['memory']} {gc['host_bytes']}")
m = gp["memory"]
device, host = m["params"] + m["grads"] + m["optimizer"], gp["host_bytes"]
lines = [l for l in open(log) if "model state:" in l]
if len(lines) != 4:
    bad.append(f"{len(lines)} model-state lines for 4 ranks")
for l in lines:
    r = re.search(r"model state: (\d+) bytes on device, (\d+) bytes on host", l)
    if (int(r[1]), int(r[2])) != (device, host):
        bad.append(f"a rank holds {r[1]} B on device and {r[2]} B on host; the plan says "
                   f"{device:.0f} and {host:.0f}: {l.strip()}")
# the program prints the planner's step for its layout: the compiled plan's
steps = [l for l in open(log) if l.startswith("timing:")]
want = f"planner, on {gc['gpu']}: {1e3 * c['step_time_s']:.4g} ms"
if len(steps) != 1 or want not in steps[0]:
    bad.append(f"want '{want}' in the timing line: {steps}")
layout = ", ".join(sorted({f"dp {b['dp']} x tp {b['tp']} ZeRO-{b['zero']} offload {b['offload']:g}"
                           for b in p["blocks"]}))
print(f"{'FAIL' if bad else 'ok  '} {name} ({p['precision']}; {layout}): model state "
      f"{device:.0f} B on device, {host:.0f} B on host per rank")
for b in bad:
    print(f"  {b}")
sys.exit(1 if bad else 0)
PY
done
exit $ok
