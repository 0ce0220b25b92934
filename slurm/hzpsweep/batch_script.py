"""The job-array batch script of one task shape (nodes x ranks per node): sbatch header, environment, and
one `hzpbench run` per array task, its task picked by SLURM_ARRAY_TASK_ID from tasks.txt.

The array index is the task's index in the whole sweep, so a resubmission of tasks 3 and 7 is the same
script with --array=3,7. Everything the run needs is in the script, so it can be read and resubmitted by
hand (sbatch --array=3 results/<sweep>/job-1n-2r.sbatch).

Preemption (sweep.requeue, docs/sweeps.md): Slurm sends SIGUSR1 to the ranks signal_grace seconds before the time
limit (or `scancel --signal=USR1` does); the run checkpoints after the step in flight into checkpoints/<task>/ and
exits 5 (preempted); the script then requeues its own array task, and the requeued task (like a resubmitted one)
resumes from the newest complete checkpoint there, into a new results file that names the one it continues.
"""
from __future__ import annotations

import shlex
from pathlib import Path

from .spec import Sweep, slurm_time


def sbatch_header(sweep: Sweep, shape: tuple[int, int], d: Path, overcommit: bool) -> list[str]:
    nodes, rpn = shape
    h = [f"--job-name=hzp-{sweep.name}", f"--nodes={nodes}", f"--ntasks={nodes * rpn}"]
    if not overcommit:
        # With --overcommit Slurm refuses --ntasks-per-node above a node's CPUs ("Requested node configuration
        # is not available"); the launcher lays the ranks out per node instead.
        h.append(f"--ntasks-per-node={rpn}")
    h += [f"--cpus-per-task={sweep.cpus_per_task}", f"--output={d}/slurm/%A_%a.out"]
    if sweep.requeue:
        # No B: prefix: the signal goes to the job steps (the ranks), which checkpoint; the batch shell only waits.
        # --requeue: the job may be requeued (clusters with JobRequeue=0 refuse `scontrol requeue` without it),
        # and Slurm requeues it itself on a node failure or a preemption with PreemptMode=REQUEUE.
        h += [f"--signal=USR1@{sweep.signal_grace_s}", "--requeue", "--open-mode=append"]
    if sweep.gpus_per_node:
        h.append(f"--gpus-per-node={sweep.gpus_per_node}")
    if sweep.time_per_task_s:
        h.append(f"--time={slurm_time(sweep.time_per_task_s)}")
    if sweep.partition:
        h.append(f"--partition={sweep.partition}")
    if sweep.account:
        h.append(f"--account={sweep.account}")
    if overcommit:
        # More ranks than CPUs on a node: without it Slurm keeps the job pending forever (docs/environment.md).
        h.append("--overcommit")
    h += sweep.sbatch_args
    return h


def job_environment(sweep: Sweep) -> dict[str, str]:
    """Environment of every rank, before the spec's own [sweep.env] (which wins)."""
    env = {
        # One OpenBLAS thread per CPU Slurm gives a rank; the harness lowers it further when ranks >= cores.
        "OPENBLAS_NUM_THREADS": str(sweep.cpus_per_task),
        "OMP_NUM_THREADS": str(sweep.cpus_per_task),
    }
    if sweep.gpus_per_node:
        # NCCL's warnings (a failed init, a lost peer) land in the task's log beside hzpbench's message.
        env["NCCL_DEBUG"] = "WARN"
    env.update(sweep.env)
    return env


def launch_command(sweep: Sweep, program: str, rpn: int, overcommit: bool) -> str:
    run = (f'{shlex.quote(program)} run --config "$sweep_dir/configs/$task.toml" --out "$sweep_dir/$task.h5" '
           '--set "output.checkpoint_dir=$ckpt_dir" "${resume[@]}"')
    if sweep.launcher == "mpiexec":
        # Hydra's Slurm bootstrap starts the ranks on the allocation's nodes, rpn per node.
        return f'mpiexec -n "$SLURM_NTASKS" -ppn {rpn} {run}'
    flags = f"--mpi=pmi2 --kill-on-bad-exit=1 --ntasks-per-node={rpn}" + (" --overcommit" if overcommit else "")
    return f"srun {flags} {run}"


def render(sweep: Sweep, shape: tuple[int, int], d: Path, program: str, overcommit: bool) -> str:
    header = "\n".join(f"#SBATCH {shlex.quote(a)}" for a in sbatch_header(sweep, shape, d, overcommit))
    env = "\n".join(f"export {k}={shlex.quote(v)}" for k, v in job_environment(sweep).items())
    return f"""#!/bin/bash
# Sweep '{sweep.name}': tasks of {shape[0]} node(s) x {shape[1]} rank(s) per node, one per array index.
# Written by slurm/sweep from {sweep.spec_path}; submit with sbatch --array=<task indices> (tasks.txt).
{header}
set -euo pipefail
sweep_dir={shlex.quote(str(d))}
task=$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" "$sweep_dir/tasks.txt")
if [ -z "$task" ]; then
  echo "sweep {sweep.name}: no task at array index $SLURM_ARRAY_TASK_ID in $sweep_dir/tasks.txt" >&2
  exit 2
fi
{env}
# Recorded in the results file as env.HZP_SWEEP / env.HZP_SWEEP_TASK beside SLURM_ARRAY_JOB_ID/TASK_ID.
export HZP_SWEEP={shlex.quote(sweep.name)}
export HZP_SWEEP_TASK="$task"
echo "=== sweep {sweep.name} task $task: job ${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}} (id $SLURM_JOB_ID, restart ${{SLURM_RESTART_COUNT:-0}}) on $SLURM_JOB_NODELIST at $(date -u +%FT%TZ)" >> "$sweep_dir/$task.log"
{RESUME}
set +e
{launch_command(sweep, program, shape[1], overcommit)} >> "$sweep_dir/$task.log" 2>&1
rc=$?
set -e
{_requeue(sweep, program)}exit $rc
"""


# The task's checkpoints and the resume (checkpoints.py does the same for run-local and names them): the newest
# complete checkpoint (a partial one never has the final name) is resumed; the results file it continues moves to
# superseded/ first, numbered as resubmit numbers attempts, so the task's own file is always its latest attempt.
RESUME = """ckpt_dir="$sweep_dir/checkpoints/$task"
mkdir -p "$ckpt_dir"
resume=()
last_step=-1
for f in "$ckpt_dir/$task".step*.ckpt.h5; do
  [ -e "$f" ] || continue
  n=${f##*.step}
  n=${n%.ckpt.h5}
  if [ "$n" -gt "$last_step" ]; then last_step=$n; resume=(--resume "$f"); fi
done
if [ ${#resume[@]} -gt 0 ]; then
  if [ -e "$sweep_dir/$task.h5" ]; then
    mkdir -p "$sweep_dir/superseded"
    k=1
    while [ -e "$sweep_dir/superseded/$task.attempt$k.h5" ] || [ -e "$sweep_dir/superseded/$task.attempt$k.log" ] || \\
          [ -e "$sweep_dir/superseded/$task.attempt$k.checkpoints" ]; do k=$((k + 1)); done
    mv "$sweep_dir/$task.h5" "$sweep_dir/superseded/$task.attempt$k.h5"
    echo "=== the run it continues: superseded/$task.attempt$k.h5" >> "$sweep_dir/$task.log"
  fi
  echo "=== resuming from ${resume[1]} (after step $last_step)" >> "$sweep_dir/$task.log"
fi"""


def _requeue(sweep: Sweep, program: str) -> str:
    if not sweep.requeue:
        return ""
    # Preempted: the run checkpointed on the signal. Its exit code 5 reaches mpiexec, but srun reports the MPI_Abort
    # that delivers it at W > 1 as tasks killed (137), so the results file's status decides. SLURM_JOB_ID is this array task's own id, so only this
    # task is requeued (SLURM_ARRAY_JOB_ID would requeue every task of the array, finished ones included); the
    # requeued task starts this script again and resumes from the checkpoint. A failed requeue leaves the task
    # preempted for `slurm/sweep resubmit`.
    return f"""state=$({shlex.quote(program)} inspect --json "$sweep_dir/$task.h5" 2>/dev/null || true)
if [ "$rc" -eq 5 ] || [[ $state == *'"status": "preempted: '* ]]; then
  echo "=== preempted (exit $rc): requeueing job $SLURM_JOB_ID to resume from its checkpoint at $(date -u +%FT%TZ)" >> "$sweep_dir/$task.log"
  scontrol requeue "$SLURM_JOB_ID" >> "$sweep_dir/$task.log" 2>&1 || echo "=== scontrol requeue failed: slurm/sweep resubmit resumes the task" >> "$sweep_dir/$task.log"
fi
"""
