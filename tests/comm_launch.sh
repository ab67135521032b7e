#!/usr/bin/env bash
# The launch checks of rt_comm_init: a program started on the wrong number of
# processes stops with one line that says how to run it, and a non-zero status.
#
#   comm_launch.sh single TEST_COMM_SINGLE   comm_single.c: compiled for 4 ranks;
#                                            started by a launcher (its environment
#                                            faked, so no mpirun is needed)
#   comm_launch.sh mpi TEST_COMM_MPI         comm_mpi.c under tests/mpirun.sh: 4 ranks
#                                            compiled, 2 started; a bucket over INT_MAX
# Exits 77 (ctest: skipped) when the mpi case finds no mpirun.
set -uo pipefail
mode=$1 bin=$2
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
nfail=0
fail() { echo "FAIL: $*"; sed 's/^/  | /' "$out"; nfail=$((nfail + 1)); }

# expect STATUS TEXT COMMAND...: runs COMMAND (stdout and stderr to $out); STATUS
# is 0 or "error" (non-zero); TEXT must be the one `train: error:` line, or
# "" for none.
expect() {
  local status=$1 text=$2
  shift 2
  "$@" > "$out" 2>&1
  local rc=$?
  [ $rc -ne 77 ] || { echo "SKIP: mpirun not found"; exit 77; }
  [ $rc -ne 124 ] || { fail "timed out: $*"; return; }
  if [ "$status" = 0 ] && [ $rc -ne 0 ]; then fail "exit $rc, expected 0: $*"; return; fi
  if [ "$status" = error ] && [ $rc -eq 0 ]; then fail "exit 0, expected an error: $*"; return; fi
  local lines
  lines=$(grep -c "train: error:" "$out")
  if [ -z "$text" ]; then
    [ "$lines" -eq 0 ] || fail "unexpected error line: $*"
  elif [ "$lines" -ne 1 ] || ! grep -qF -- "$text" "$out"; then
    fail "expected one line with '$text': $*"
  fi
}

# No launcher's variables from the environment ctest runs in.
clean=(env -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_RANK -u PMI_SIZE -u PMI_RANK
  -u MV2_COMM_WORLD_SIZE -u MV2_COMM_WORLD_RANK -u SLURM_STEP_NUM_TASKS -u SLURM_PROCID)

case $mode in
single)
  expect error "train: error: this program was compiled for 4 ranks (dp 2 x tp 2) but built \
without MPI; build it with make cpu on a machine with MPI (apt-get install libopenmpi-dev) and \
run it with mpirun -np 4 $bin" "${clean[@]}" "$bin" --ranks 4
  expect error "train: error: this program was compiled for one rank but started as one of 2 \
processes (OMPI_COMM_WORLD_SIZE=2); run it as $bin, without mpirun or srun" \
    "${clean[@]}" OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 "$bin" --ranks 1
  expect error "" "${clean[@]}" OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1 "$bin" --ranks 1
  expect error "(PMI_SIZE=3)" "${clean[@]}" PMI_SIZE=3 PMI_RANK=0 "$bin" --ranks 1
  expect error "(SLURM_STEP_NUM_TASKS=8)" "${clean[@]}" SLURM_STEP_NUM_TASKS=8 "$bin" --ranks 1
  expect error "compiled for 2 ranks (dp 1 x tp 2) but built without MPI" \
    "${clean[@]}" OMPI_COMM_WORLD_SIZE=2 "$bin" --ranks 2
  # one process: a batch script's SLURM_NTASKS, or mpirun -np 1
  expect 0 "" "${clean[@]}" SLURM_NTASKS=4 "$bin" --ranks 1
  expect 0 "" "${clean[@]}" OMPI_COMM_WORLD_SIZE=1 "$bin" --ranks 1
  ;;
mpi)
  expect error "train: error: this program was compiled for 4 ranks (dp 2 x tp 2); run it with \
mpirun -np 4 $bin (started on 2)" "$here/mpirun.sh" 2 "$bin" --ranks 4
  expect error "train: error: rank 0: rt_allreduce: 2147483648 elements is more than MPI's int \
count allows (2147483647); split the buffer" "$here/mpirun.sh" 1 "$bin" --ranks 1 --too-big
  ;;
*)
  echo "usage: comm_launch.sh single|mpi TEST_COMM_BINARY" >&2
  exit 2
  ;;
esac
echo "$nfail failed"
[ $nfail -eq 0 ]
