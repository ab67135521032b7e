#!/usr/bin/env bash
# Runs a program on N ranks of this machine, for the multi-rank tests:
#
#   tests/mpirun.sh N PROGRAM ARGS...
#
# The exit status is the program's (mpirun's), with two of its own:
#   77   mpirun is not installed (ctest: skipped, with SKIP_RETURN_CODE 77)
#   124  the run took longer than MTC_MPIRUN_TIMEOUT seconds (default 300)
#        and was killed: a test that deadlocks fails instead of hanging
#
# With Open MPI it oversubscribes (test machines have fewer cores than ranks),
# leaves processes unbound (bound ranks sharing a core would crawl), and runs
# as root where the tests run as root (containers). Other MPIs' mpirun (MPICH's
# hydra) takes -np alone and oversubscribes anyway.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: tests/mpirun.sh N PROGRAM ARGS..." >&2
  exit 2
fi
n=$1
shift
if ! command -v mpirun > /dev/null; then
  echo "SKIP: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"
  exit 77
fi
args=(-np "$n")
if mpirun --version 2>&1 | grep -q "Open MPI"; then
  args+=(--oversubscribe --bind-to none)
  [ "$(id -u)" -ne 0 ] || args+=(--allow-run-as-root)
  # ranks waiting in a collective yield the core to the ranks they wait for
  export OMPI_MCA_mpi_yield_when_idle=1
fi
exec timeout -k 10 "${MTC_MPIRUN_TIMEOUT:-300}" mpirun "${args[@]}" "$@"
