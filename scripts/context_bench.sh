#!/usr/bin/env bash
# The long-context benchmark (issue 19, docs/nd-parallel.md "Context parallelism"): `small` on 4 ranks as 2
# virtual nodes of 2, emulated links (profile h100-dgx, bandwidths set from the measured compute rate), one
# results file per layout and sequence length, then one table (scripts/context_bench_table.py). Every run trains
# 4 sequences of T tokens per step (micro-batches of 1), so the tokens per step grow with T and the layouts at one T
# see the same work:
#   nd_cp4      cp = 4 (the ring spans both nodes)
#   nd_cp2_tp2  tp = 2 inside a node, cp = 2 across the nodes, sequence parallel
#   nd_tp4      tp = 4 across both nodes (scheduler.tp_across_nodes), sequence parallel
#   asynchzp    z1 = 4, z2 = z3 = 2: each rank trains whole sequences; parameter groups inside a node
#   asynchzp_cp2  cp = 2 inside a node with z3 = z2 = cp = 2, z1 = 4 (the paper's AsyncHZP layout, Z2 = Z3 = CP)
#   asynchzp_cp4  cp = 4 over both nodes, z1 = z2 = z3 = 4
# Usage: [LENGTHS="1024 4096"] [CONFIGS="nd_cp4 ..."] [STEPS=3] [GB=4] [EMULATE=true] scripts/context_bench.sh [out_dir]
# GB sets the sequences per step; EMULATE=false runs without the link model, so a step is the layout's compute
# and its memory alone (how the long-context rows were run: with modelled links a step at T = 4096 is tens of
# minutes of modelled transfer on this machine's calibrated link rates).
# T = 16384 exceeds `small`'s model.max_seq_len guard (4096), which is raised for these runs. One step at T = 16384
# is minutes of CPU per layout (the attention work grows as T²); LENGTHS picks the lengths.
set -euo pipefail
out=${1:-results/context_bench}
bin=${HZPBENCH:-build/bin/hzpbench}
steps=${STEPS:-3}
mkdir -p "$out"
common=(--set model.preset=small --set topology.ranks_per_node=2 --set links.emulate="${EMULATE:-true}"
        --set train.global_batch="${GB:-4}" --set train.micro_batch_size=1
        --set train.steps="$steps" --set train.warmup_steps=1 --set harness.warmup_steps=1)
for T in ${LENGTHS:-1024 4096 16384}; do
  for cfg in ${CONFIGS:-nd_cp4 nd_cp2_tp2 nd_tp4 asynchzp}; do
    case $cfg in
      nd_cp4) extra=(--set scheduler.name=nd --set scheduler.cp=4) ;;
      nd_cp2_tp2) extra=(--set scheduler.name=nd --set scheduler.cp=2 --set scheduler.tp=2
                         --set scheduler.sequence_parallel=true) ;;
      nd_tp4) extra=(--set scheduler.name=nd --set scheduler.tp=4 --set scheduler.sequence_parallel=true
                     --set scheduler.tp_across_nodes=true) ;;
      asynchzp) extra=(--set scheduler.name=asynchzp --set scheduler.z1=4 --set scheduler.z2=2 --set scheduler.z3=2) ;;
      asynchzp_cp2) extra=(--set scheduler.name=asynchzp --set scheduler.cp=2 --set scheduler.z1=4 --set scheduler.z2=2
                           --set scheduler.z3=2) ;;
      asynchzp_cp4) extra=(--set scheduler.name=asynchzp --set scheduler.cp=4 --set scheduler.z1=4 --set scheduler.z2=4
                           --set scheduler.z3=4) ;;
      *) echo "unknown configuration $cfg" >&2; exit 2 ;;
    esac
    f="$out/${cfg}_T$T.h5"
    echo "== $cfg T=$T -> $f"
    mpiexec -n 4 "$bin" run --out "$f" --force "${common[@]}" --set model.seq_len="$T" \
      --set model.max_seq_len="$(( T > 4096 ? T : 4096 ))" "${extra[@]}" >/dev/null
  done
done
python3 "$(dirname "$0")/context_bench_table.py" "$out"
