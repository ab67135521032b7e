# Waiting for an idle machine before a timed run (bench/dist.sh,
# bench/fidelity.sh), sourced; needs $ncpu (the online CPUs), $wait_s (the
# most seconds to wait) and $tmp (a scratch folder).
# shellcheck shell=bash
# Other load: CPU seconds all CPUs spent busy so far (/proc/stat), and what
# this shell's finished children used (bash's `times`; mpirun reaps its ranks,
# so theirs is in it).
cpu_busy() { awk -v hz="$(getconf CLK_TCK)" '/^cpu / { printf "%.2f", ($2 + $3 + $4 + $7 + $8 + $9) / hz }' /proc/stat; }
# (`times` must run in this shell, not in a $(...) subshell, whose counts start at 0.)
own_cpu() { times > "$tmp/times"; tail -1 "$tmp/times" | awk '{ split($1 "m" $2, t, "m"); sub(/s$/, "", t[2]); sub(/s$/, "", t[4]); printf "%.3f", 60 * (t[1] + t[3]) + t[2] + t[4] }' > "$tmp/own"; }

# Waits (at most --wait seconds) until the CPUs were at most 15% busy over a
# second; prints that share.
wait_for_idle() {
  local t0=$SECONDS b0 b1 busy
  while :; do
    b0=$(cpu_busy)
    sleep 1
    b1=$(cpu_busy)
    busy=$(awk -v a="$b0" -v b="$b1" -v n="$ncpu" 'BEGIN { printf "%.0f", 100 * (b - a) / n }')
    if [ "$busy" -le 15 ] || [ $((SECONDS - t0)) -ge "$wait_s" ]; then echo "$busy"; return; fi
  done
}

