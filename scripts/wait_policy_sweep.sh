#!/usr/bin/env bash
# Measures the MPI backend's wait policies (collectives.wait_policy) on small all_gathers:
# inline at 2 ranks, and from a background thread at 4 and 8 ranks, with the main thread computing
# (AsyncHZP's prefetch) and idle; also inline at 4 and 8. Prints the median over repetitions of the
# MAX-over-ranks time per call (µs). Usage: scripts/wait_policy_sweep.sh [build-dir] [repetitions]
set -euo pipefail
BUILD=${1:-build}
REPS=${2:-5}
BENCH="$BUILD/bin/bench_wait_policy"
[ -x "$BENCH" ] || { echo "no $BENCH: build the bench_wait_policy target first" >&2; exit 1; }
export OPENBLAS_NUM_THREADS=1
echo "# $(date -Is) host $(hostname) cores $(nproc) load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %-18s %-8s %10s %10s %10s\n' ranks mode bytes yield backoff mixed
run() {  # ranks mode-flag label
  local n=$1 flag=$2 label=$3
  mpiexec -n "$n" "$BENCH" $flag --benchmark_min_time=0.05 --benchmark_repetitions="$REPS" \
    --benchmark_report_aggregates_only=true --benchmark_format=csv 2>/dev/null |
  awk -F, -v n="$n" -v label="$label" '
    /_median"?,/ {
      name = $1; gsub(/"/, "", name)
      split(name, parts, "/")           # all_gather/<policy>/bytes:<b>/manual_time_median
      policy = parts[2]; sub("bytes:", "", parts[3]); b = parts[3]
      t[b, policy] = $3; sizes[b] = 1
    }
    END {
      for (b in sizes) printf "%-6s %-18s %-8s %10.1f %10.1f %10.1f\n", n, label, b, t[b,"yield"], t[b,"backoff"], t[b,"mixed"]
    }' | sort -k3 -n
}
run 2 "" inline
for n in 4 8; do
  run "$n" --background bg-main-computes
  run "$n" --background-idle bg-main-idle
  run "$n" "" inline
done
