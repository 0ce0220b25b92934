#!/usr/bin/env python3
"""Preemption on a real Slurm (docs/sweeps.md, "Preemption"): a task signalled as Slurm signals it before a time
limit (`scancel --signal=USR1`) checkpoints, is requeued by its job script, resumes from the checkpoint and ends ok
with the same losses, bitwise, as an uninterrupted repeat of the same task; with sweep.requeue = false the same
signal leaves it `preempted` (status shows the step reached) and `slurm/sweep resubmit` resumes it from its
checkpoint instead of step 0, again bitwise. Starts and stops a private Slurm (private_slurm.py); exit 77 as there.
With --launcher mpiexec the job script starts the ranks with MPICH's mpiexec (Hydra, which launches its proxies
through Slurm) instead of srun, and the requeue scenario runs: the signal reaches the ranks, exit 5 reaches the
script, the task is requeued and resumes bitwise.

usage: preempt_on_slurm_test.py HZPBENCH WORKDIR [--launcher srun|mpiexec]
"""
import sys
import time

import h5py
import numpy as np

from private_slurm import SWEEP, check, fail, sh, statuses, run_slurm_test, wait_for_steps

STEPS = 40      # tiny at 2 ranks: a few seconds per task, a wide window to signal one mid-run


LAUNCHER = "srun"


def spec_text(name, results, hzpbench, requeue):
    extra = "" if requeue else "requeue = false\n"
    extra += f'launcher = "{LAUNCHER}"\n'
    base = "" if requeue else "output.checkpoint_on_signal = true\n"  # checkpoints on the signal, no requeue
    return f"""
[sweep]
name = "{name}"
results_dir = "{results}"
hzpbench = "{hzpbench}"
ranks_per_node = 2
repeats = 2
time_per_task = "00:05:00"
{extra}
[base]
model.preset = "tiny"
scheduler.name = "zero3"
train.steps = {STEPS}
train.warmup_steps = 1
output.flush_s = 0.0
{base}"""


def losses(path):
    with h5py.File(path, "r") as f:
        return np.array(f["steps/loss"][:]), dict(f.attrs)


def text(a, k):
    v = a[k]
    return v.decode() if isinstance(v, bytes) else str(v)


def submit_and_signal(spec, d, env):
    """Submits the 2-task sweep and sends SIGUSR1 to task r0 once it has flushed 3 steps; returns its job."""
    rc, out, err = sh(SWEEP + ["submit", str(spec)], env)
    print(out + err)
    check(rc == 0, f"slurm/sweep submit {spec.name}")
    job = sh(["squeue", "-h", "-o", "%F"], env)[1].split()[0]
    wait_for_steps(d / "r0.h5", 3, 180, "task r0")
    rc, _, err = sh(["scancel", "--signal=USR1", f"{job}_0"], env)
    check(rc == 0, f"scancel --signal=USR1 {job}_0 while r0 runs ({err.strip()})")
    return job


def continued_losses(d, task):
    """The losses of a task stopped once and resumed: the superseded attempt's rows, then the resumed file's."""
    first, a0 = losses(d / "superseded" / f"{task}.attempt1.h5")
    rest, a1 = losses(d / f"{task}.h5")
    k = int(a1["first_step"])
    check(text(a0, "status").startswith(f"preempted: SIGUSR1 after step {k};"),
          f"the first attempt says preempted after step {k}: {text(a0, 'status')}")
    check(text(a1, "status") == "ok" and k > 0 and len(first) >= k and len(rest) == STEPS - k,
          f"the resumed attempt is ok, steps {k + 1}..{STEPS}")
    ck = text(a1, "resumed_from")
    check(ck == str(d / "checkpoints" / task / f"{task}.step{k}.ckpt.h5") and
          text(a1, "resumed_from_results") == str(d / f"{task}.h5"),
          f"it names the checkpoint and the results file it continues ({ck})")
    return np.concatenate([first[:k], rest])


def requeued(hzpbench, work, env):
    d = work / "results" / "pre"
    spec = work / "pre.toml"
    spec.write_text(spec_text("pre", work / "results", hzpbench, requeue=True))
    job = submit_and_signal(spec, d, env)
    script = (d / "job-1n-2r.sbatch").read_text()
    check("#SBATCH --signal=USR1@90" in script and "#SBATCH --requeue" in script,
          "the job script asks for --signal=USR1@90 and --requeue")
    launch = 'mpiexec -n "$SLURM_NTASKS" -ppn 2 ' if LAUNCHER == "mpiexec" else "srun --mpi=pmi2 "
    check(launch in script, f"the job script starts the ranks with {launch.strip()}")
    # A requeued job waits for a begin time Slurm sets 120 s ahead (slurmctld's requeue delay); release it at once
    # so that the test stays short. This is the only thing the test does that Slurm would otherwise do by itself.
    deadline = time.time() + 120
    while True:
        line = sh(["squeue", "-h", "-j", f"{job}_0", "-o", "%T %r"], env)[1].strip()
        if line == "PENDING BeginTime":
            sh(["scontrol", "update", f"JobId={job}_0", "StartTime=now"], env)
            break
        if not line or time.time() > deadline:
            fail(f"task r0 was not requeued (squeue: '{line}'); log:\n{(d / 'r0.log').read_text()[-2000:]}")
        time.sleep(0.2)
    check(True, "task r0 was requeued by its job script (pending on its begin time)")
    rc, out, err = sh(SWEEP + ["status", str(d), "--wait", "300"], env, timeout=360)
    print(out + err)
    st = statuses(d, env)
    check(rc == 0 and all(s["state"] == "ok" and s["steps"] == f"{STEPS}/{STEPS}" for s in st.values()),
          f"both tasks ok with {STEPS}/{STEPS} steps reached")
    log = (d / "r0.log").read_text()
    check("restart 1)" in log and "=== resuming from " in log, "r0's log shows the requeued start and the resume")
    whole, _ = losses(d / "r1.h5")
    resumed = continued_losses(d, "r0")
    check(np.array_equal(resumed, whole), "r0 stopped, requeued and resumed: losses bitwise the uninterrupted r1's")
    return whole


def resubmitted(hzpbench, work, env, whole):
    d = work / "results" / "resub"
    spec = work / "resub.toml"
    spec.write_text(spec_text("resub", work / "results", hzpbench, requeue=False))
    submit_and_signal(spec, d, env)
    rc, out, err = sh(SWEEP + ["status", str(d), "--wait", "240"], env, timeout=300)
    print(out + err)
    st = statuses(d, env)["r0"]
    reached = int(st["steps"].split("/")[0])
    check(st["state"] == "preempted" and f"reached step {reached}" in st["detail"] and 3 <= reached < STEPS,
          f"without requeue the task stays preempted, at step {reached}: {st['detail']}")
    rc, out, err = sh(SWEEP + ["resubmit", str(d)], env)
    print(out + err)
    check(rc == 0 and f"resumes from r0.step{reached}.ckpt.h5" in out and "--array=0)" in out,
          "resubmit sends the preempted task to resume from its checkpoint")
    rc, out, err = sh(SWEEP + ["status", str(d), "--wait", "240"], env, timeout=300)
    print(out + err)
    check(rc == 0 and all(s["state"] == "ok" for s in statuses(d, env).values()), "after resubmit both tasks ok")
    resumed = continued_losses(d, "r0")
    check(np.array_equal(resumed, whole) and np.array_equal(losses(d / "r1.h5")[0], whole),
          "the resubmitted task's losses are bitwise the uninterrupted run's")


def main(hzpbench, work, env, _):
    t0 = time.time()
    whole = requeued(hzpbench, work, env)
    if LAUNCHER == "mpiexec":
        log = (work / "results" / "pre" / "r0.log").read_text()
        check("=== preempted (exit 5)" in log, "under mpiexec the preempted exit code 5 reaches the job script")
        # resubmit runs the same script, its launch line included: the requeue scenario covers the launcher.
        print(f"figures: the requeue scenario under mpiexec {time.time() - t0:.1f} s")
        return
    resubmitted(hzpbench, work, env, whole)
    print(f"figures: both scenarios {time.time() - t0:.1f} s")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[3] == "--launcher" and sys.argv[4] in ("srun", "mpiexec"):
        LAUNCHER = sys.argv[4]
        del sys.argv[3:]
    run_slurm_test(__doc__, main)
