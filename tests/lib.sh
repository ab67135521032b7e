# Shared by the test scripts that compile a model and build its program.

# build_program MTC MODEL DIR LOG ARGS...: `mtc compile MODEL -o DIR ARGS` (its output in LOG),
# then `make cpu` at -O1 with -Werror. -O1: the programs a test compares are built alike, and
# the suite's time went to compiling (-O3 -march=native takes 6 s a program, -O1 1.7 s); the
# numbers compared do not depend on it. Exits with the make output on failure.
build_program() {
  local mtc=$1 model=$2 dir=$3 log=$4
  shift 4
  "$mtc" compile "$model" -o "$dir" "$@" > "$log"
  make -s -C "$dir" cpu CFLAGS="-O1 -fopenmp -std=c11 -Wall -Wextra -Werror" > "$dir.make.log" 2>&1 ||
    { cat "$dir.make.log"; exit 1; }
}
