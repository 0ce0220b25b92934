#!/usr/bin/env bash
# What deterministic mode (train.deterministic, docs/deterministic.md) costs in time: `hzpbench run` on the
# `small` preset at 2 ranks, each scheduler with the mode off and on, alternating the two runs REPS times
# so that a shared machine's load drifts over both alike; prints per scheduler the medians over runs of
# the measured steps' median step time, compute and optimizer time, the gradient state per rank and the
# bytes the rank sent per step, off and on side by side, and the ratios. Usage:
# scripts/deterministic_cost.sh [build-dir] [reps] [steps] [schedulers...]; results files stay in $OUT.
set -euo pipefail
BUILD=${1:-build}
REPS=${2:-2}
STEPS=${3:-4}
shift $(( $# > 3 ? 3 : $# ))
SCHEDULERS=${*:-"ddp zero1 zero2 zero3"}
BENCH="$BUILD/bin/hzpbench"
[ -x "$BENCH" ] || { echo "no $BENCH: build the hzpbench target first" >&2; exit 1; }
OUT=${OUT:-$(mktemp -d /tmp/deterministic_cost.XXXXXX)}
mkdir -p "$OUT"
export OPENBLAS_NUM_THREADS=1
echo "# $(date -Is) host $(hostname) cores $(nproc) load $(cut -d' ' -f1-3 /proc/loadavg); files in $OUT"
for rep in $(seq 1 "$REPS"); do
  for s in $SCHEDULERS; do
    for det in false true; do
      mpiexec -n 2 "$BENCH" run --set model.preset=small --set scheduler.name="$s" --set train.steps="$STEPS" \
        --set train.warmup_steps=1 --set harness.warmup_steps=1 --set train.deterministic=$det \
        --out "$OUT/$s.$det.$rep.h5" --force > "$OUT/$s.$det.$rep.log"
    done
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT" $SCHEDULERS <<'PY'
import glob, os, statistics, sys
import h5py, numpy as np
out, scheds = sys.argv[1], sys.argv[2:]
med = statistics.median
def measure(path):
    """Medians over the measured steps (the slowest rank's), gradient state per rank, bytes sent per rank per step."""
    with h5py.File(path, "r") as f:
        first = 1  # harness.warmup_steps
        r = lambda n: float(np.median(f[f"ranks/{n}"][first:], axis=0).max())
        sent = [0.0]
        def add(name, obj):
            if isinstance(obj, h5py.Dataset) and name.endswith("/bytes"):
                sent[0] += float(obj[first:].mean())  # [step, rank]: mean bytes per rank per step
        f["comm"].visititems(add)
        grad = float(f["memory/model_state_bytes"][:, 1].max())
        return r("step_time_s"), r("compute_s"), r("optimizer_s"), grad, sent[0]
print(f"# {'scheduler':<9} | {'step s off':>10} {'on':>7} {'on/off':>6} | {'compute off':>11} {'on':>7} | "
      f"{'optim off':>9} {'on':>7} | {'grad MiB off':>12} {'on':>7} | {'sent MiB/step off':>17} {'on':>7}")
for s in scheds:
    v = {}
    for det in ("false", "true"):
        runs = [measure(p) for p in sorted(glob.glob(os.path.join(out, f"{s}.{det}.*.h5")))]
        v[det] = [med(x[i] for x in runs) for i in range(5)]
    off, on = v["false"], v["true"]
    mib = 1024 * 1024
    print(f"  {s:<9} | {off[0]:>10.2f} {on[0]:>7.2f} {on[0] / off[0]:>6.2f} | {off[1]:>11.2f} {on[1]:>7.2f} | "
          f"{off[2]:>9.3f} {on[2]:>7.3f} | {off[3] / mib:>12.1f} {on[3] / mib:>7.1f} | {off[4] / mib:>17.1f} {on[4] / mib:>7.1f}")
PY
