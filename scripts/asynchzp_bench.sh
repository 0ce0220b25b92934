#!/usr/bin/env bash
# The asynchzp benchmark (issue 9, docs/data-parallel.md "asynchzp benchmark"): `small` at 4 ranks as 2
# virtual nodes of 2, emulated links at links.comm_to_compute 0.5, 1 and 2, for zero3, hsdp Z=2, asynchzp
# inline and asynchzp async with prefetch 1 and 2 (z1 = 4, z2 = z3 = 2), one results file each, then one
# table (scripts/asynchzp_bench_table.py). CONFIGS picks the runs; besides those five it knows nd's tp2×dp2
# layouts (issue 17, docs/nd-parallel.md): nd_tp2, nd_tp2_sp (sequence parallelism), nd_tp2_do (distributed
# optimizer), nd_tp2_sp_do (both); and its pipeline layouts (issue 18): nd_pp2 (pp2×dp2, 1F1B), nd_pp2_gpipe, nd_pp2_int
# (interleaved, v = 2), nd_tp2_pp2 (tp2 inside a node × pp2 across, SP). Stages are the outermost mesh axis, so
# with 2 nodes of 2 the pipeline's messages cross nodes and tp and dp stay inside them. With PRESET=small-moe
# (issue 21, docs/nd-parallel.md "Expert parallelism") it also knows nd's expert layouts: nd_ep2 (ep2×dp2: the
# experts split over the 2 ranks of a node, tokens exchanged by all-to-all there) and nd_ep4 (every rank holds 2 of
# the 8 experts; the all-to-all crosses nodes); the table then adds the all-to-all share and the load balance.
# GLOBAL_BATCH sets train.global_batch (the micro-batches per rank are it over the ranks: issue 26's goals are at 8
# and 2 per rank). RANKS, RPN and Z1/Z2/Z3 change the layout (default 4 ranks as 2 nodes of 2, z1 = 4, z2 = z3 = 2);
# RANKS=2 RPN=1 Z1=2 Z2=1 Z3=1 is the layout this 2-core machine can time: every asynchzp collective is the step
# end's, between the two nodes. asynchzp_p2_split is asynchzp_p2 with scheduler.tied_split = rows_allgather (the
# tied table's rows exchanged apart, all-gathered; docs/data-parallel.md "The tied table's chain"), asynchzp_p2_a2a
# the same with rows_alltoall (each row sent to the ranks whose optimizer slices hold it). CP=c runs the asynchzp
# layouts with context parallelism (scheduler.cp; z1 must be a multiple of it), and UNIT_SLEEP_MS=s sleeps s ms after
# every block's forward and backward (the benchmark hook scheduler.debug_unit_sleep_ms, exported with
# HZPBENCH_BENCHMARK_HOOKS=1), so that ranks sharing few cores are charged a known unit time.
# Usage: [PRESET=small|small-moe] [RATIOS="0.5 1 2"] [CONFIGS="zero3 asynchzp_p2 nd_tp2 ..."] [GLOBAL_BATCH=N]
# [RANKS=4 RPN=2 Z1=4 Z2=2 Z3=2] [CP=1] [UNIT_SLEEP_MS=0] scripts/asynchzp_bench.sh [out_dir] [steps]
# MPIEXEC names the launcher (default mpiexec) and TABLE=0 leaves the table out (a machine without h5py: the
# results files are made there and the table where h5py is, as scripts/cores16_check does).
set -euo pipefail
out=${1:-results/asynchzp_bench}
steps=${2:-3}
bin=${HZPBENCH:-build/bin/hzpbench}
mkdir -p "$out"
ranks=${RANKS:-4}
common=(--set model.preset="${PRESET:-small}" --set topology.ranks_per_node="${RPN:-2}" --set links.emulate=true
        --set train.steps="$steps" --set train.warmup_steps=1 --set harness.warmup_steps=1)
[[ -n ${GLOBAL_BATCH:-} ]] && common+=(--set train.global_batch="$GLOBAL_BATCH")
if [[ -n ${UNIT_SLEEP_MS:-} ]]; then
  export HZPBENCH_BENCHMARK_HOOKS=1
  common+=(--set scheduler.debug_unit_sleep_ms="$UNIT_SLEEP_MS")
fi
hzp=(--set scheduler.name=asynchzp --set scheduler.z1="${Z1:-4}" --set scheduler.z2="${Z2:-2}" --set scheduler.z3="${Z3:-2}"
     --set scheduler.cp="${CP:-1}")
nd=(--set scheduler.name=nd --set scheduler.tp=2)
for r in ${RATIOS:-0.5 1 2}; do
  for cfg in ${CONFIGS:-zero3 hsdp asynchzp_inline asynchzp_p1 asynchzp_p2}; do
    case $cfg in
      zero3) extra=(--set scheduler.name=zero3) ;;
      hsdp) extra=(--set scheduler.name=hsdp --set scheduler.group_size=2) ;;
      asynchzp_inline) extra=("${hzp[@]}" --set scheduler.async=false) ;;
      asynchzp_p1) extra=("${hzp[@]}" --set scheduler.async=true --set scheduler.prefetch=1) ;;
      asynchzp_p2) extra=("${hzp[@]}" --set scheduler.async=true --set scheduler.prefetch=2) ;;
      asynchzp_p2_split) extra=("${hzp[@]}" --set scheduler.async=true --set scheduler.prefetch=2 --set scheduler.tied_split=rows_allgather) ;;
      asynchzp_p2_a2a) extra=("${hzp[@]}" --set scheduler.async=true --set scheduler.prefetch=2 --set scheduler.tied_split=rows_alltoall) ;;
      nd_tp2) extra=("${nd[@]}") ;;
      nd_tp2_sp) extra=("${nd[@]}" --set scheduler.sequence_parallel=true) ;;
      nd_tp2_do) extra=("${nd[@]}" --set scheduler.distributed_optimizer=true) ;;
      nd_tp2_sp_do) extra=("${nd[@]}" --set scheduler.sequence_parallel=true --set scheduler.distributed_optimizer=true) ;;
      nd_pp2) extra=(--set scheduler.name=nd --set scheduler.pp=2) ;;
      nd_pp2_gpipe) extra=(--set scheduler.name=nd --set scheduler.pp=2 --set scheduler.schedule=gpipe) ;;
      nd_pp2_int) extra=(--set scheduler.name=nd --set scheduler.pp=2 --set scheduler.schedule=interleaved --set scheduler.virtual_stages=2) ;;
      nd_tp2_pp2) extra=("${nd[@]}" --set scheduler.pp=2 --set scheduler.sequence_parallel=true) ;;
      nd_ep2) extra=(--set scheduler.name=nd --set scheduler.ep=2) ;;
      nd_ep4) extra=(--set scheduler.name=nd --set scheduler.ep=4) ;;
      *) echo "unknown configuration $cfg" >&2; exit 2 ;;
    esac
    f="$out/${cfg}_r$r.h5"
    echo "== $cfg r=$r -> $f"
    "${MPIEXEC:-mpiexec}" -n "$ranks" "$bin" run --out "$f" "${common[@]}" --set links.comm_to_compute="$r" "${extra[@]}" >/dev/null
  done
done
[[ ${TABLE:-1} == 0 ]] || python3 "$(dirname "$0")/asynchzp_bench_table.py" "$out"
