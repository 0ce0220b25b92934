#!/usr/bin/env bash
# The pipeline-bubble benchmark (issue 18, docs/nd-parallel.md "Pipeline bubble"): nd with pp stages on `tiny`,
# each block's forward and backward followed by a fixed sleep (scheduler.debug_unit_sleep_ms, a benchmark hook the
# harness refuses without HZPBENCH_BENCHMARK_HOOKS=1) so that a stage's work is known and balanced, at pp = 2 and 4
# and m = 4 and 8 micro-batches per step, 1F1B and interleaved 1F1B (v = 2). The table
# (scripts/pipeline_bubble_table.py) sets the measured pipeline-wait share of the step beside the closed form
# (pp − 1)/(m + pp − 1) or (pp − 1)/(v·m + pp − 1). Sleeps use no CPU, so pp = 4 ranks run on 2 cores.
# Usage: [SLEEP_MS=40] scripts/pipeline_bubble.sh [out_dir] [steps]
set -euo pipefail
out=${1:-results/pipeline_bubble}
steps=${2:-4}
bin=${HZPBENCH:-build/bin/hzpbench}
sleep_ms=${SLEEP_MS:-40}
mkdir -p "$out"
export HZPBENCH_BENCHMARK_HOOKS=1
for pp in 2 4; do
  for m in 4 8; do
    for sched in 1f1b interleaved; do
      v=1; layers=4
      if [ "$sched" = interleaved ]; then v=2; layers=$((2 * pp)); fi
      [ "$layers" -lt 4 ] && layers=4
      f="$out/pp${pp}_m${m}_${sched}.h5"
      echo "== pp=$pp m=$m $sched -> $f"
      mpiexec -n "$pp" "$bin" run --out "$f" --force --set model.preset=tiny --set model.layers="$layers" \
        --set train.micro_batch_size=1 --set train.global_batch="$m" --set train.steps="$steps" \
        --set train.warmup_steps=1 --set harness.warmup_steps=1 --set scheduler.name=nd --set scheduler.pp="$pp" \
        --set scheduler.schedule="$sched" --set scheduler.virtual_stages="$v" \
        --set scheduler.debug_unit_sleep_ms="$sleep_ms" --set links.emulate=false >/dev/null
    done
  done
done
python3 "$(dirname "$0")/pipeline_bubble_table.py" "$out"
