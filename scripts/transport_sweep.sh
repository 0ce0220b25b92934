#!/usr/bin/env bash
# Compares the transports of intra-machine hops (collectives.transport = mpi vs shm) with
# `hzpbench collectives` at 2 ranks, alternating the two runs REPS times so that a shared machine's
# load drifts over both alike, then prints per op and size the medians over runs: busbw (from mean
# times, nccl-tests' convention), busbw from p50 times, and p50 busbw as a share of the memcpy
# reference measured in the same run. Usage: scripts/transport_sweep.sh [build-dir] [reps] [extra
# hzpbench args...]; CSVs are kept in $OUT (default: a fresh temporary folder).
set -euo pipefail
BUILD=${1:-build}
REPS=${2:-5}
shift $(( $# > 2 ? 2 : $# ))
BENCH="$BUILD/bin/hzpbench"
[ -x "$BENCH" ] || { echo "no $BENCH: build the hzpbench target first" >&2; exit 1; }
OUT=${OUT:-$(mktemp -d /tmp/transport_sweep.XXXXXX)}
mkdir -p "$OUT"
export OPENBLAS_NUM_THREADS=1
echo "# $(date -Is) host $(hostname) cores $(nproc) load $(cut -d' ' -f1-3 /proc/loadavg); csv in $OUT"
for rep in $(seq 1 "$REPS"); do
  for t in mpi shm; do
    mpiexec -n 2 "$BENCH" collectives --ops all_gather,reduce_scatter -b 1K -e 64M \
      --set collectives.transport=$t --csv "$OUT/$t.$rep.csv" "$@" > "$OUT/$t.$rep.log"
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT" <<'EOF'
import csv, glob, os, statistics, sys
out = sys.argv[1]
rows = {}  # (op, size, transport) -> [(busbw, busbw_p50, memcpy)]
for path in sorted(glob.glob(os.path.join(out, "*.csv"))):
    transport = os.path.basename(path).split(".")[0]
    for r in csv.DictReader(open(path)):
        key = (r["op"], int(r["size_bytes"]), transport)
        rows.setdefault(key, []).append((float(r["busbw_gbps"]), float(r["busbw_p50_gbps"]), float(r["memcpy_gbps"])))
med = statistics.median
memcpy = med(v[2] for vs in rows.values() for v in vs)
print(f"# memcpy reference (64 MiB, one core alone), median over runs: {memcpy:.2f} GB/s")
print(f"# {'op':<14} {'size (B)':>10} | {'mpi busbw':>9} {'p50':>6} {'%mcp':>5} | {'shm busbw':>9} {'p50':>6} {'%mcp':>5} | shm/mpi")
for op in ("all_gather", "reduce_scatter"):
    for size in sorted({k[1] for k in rows if k[0] == op}):
        line, p50 = f"  {op:<14} {size:>10}", {}
        for t in ("mpi", "shm"):
            vs = rows.get((op, size, t), [])
            if not vs:
                line += " | " + " " * 22
                continue
            p50[t] = med(v[1] for v in vs)
            ratio = med(v[1] / v[2] for v in vs)  # each run against its own memcpy
            line += f" | {med(v[0] for v in vs):9.2f} {p50[t]:6.2f} {100 * ratio:4.0f}%"
        if len(p50) == 2:
            line += f" | {p50['shm'] / p50['mpi']:5.1f}x"
        print(line)
EOF
