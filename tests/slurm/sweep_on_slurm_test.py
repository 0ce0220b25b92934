#!/usr/bin/env python3
"""A sweep on a real Slurm: starts a private single-node slurmctld/slurmd (scripts/local_slurm), submits a
4-task sweep with slurm/sweep (tiny model, 2 and 4 ranks: two job arrays, the 4-rank one with
--overcommit where the node has fewer CPUs), kills one task mid-run with scancel, and checks that
`status` says killed (and why), that `resubmit` sends only that task and completes it, and that the result
files and analysis.collect agree. No mock: every state comes from Slurm and the files.

Exit 77 (a visible CTest skip) only when the Slurm binaries are missing and the environment variable CI
is unset; in CI (CI set) a missing Slurm fails, so the test cannot pass by not running.

usage: sweep_on_slurm_test.py HZPBENCH WORKDIR
"""
import json
import subprocess
import sys
import time
from pathlib import Path

from private_slurm import REPO, SWEEP, check, fail, flushed_steps, sh, statuses, run_slurm_test

STEPS = 32      # per task: a few seconds here, and a wide window to kill one mid-run


def main(hzpbench, work, env, slurm_dir):
    rc, out, _ = sh([str(REPO / "scripts" / "local_slurm"), "start", str(slurm_dir)], env)
    check(rc == 0 and "already running" in out, "local_slurm start is idempotent")
    run(hzpbench, work, env)


def run(hzpbench, work, env):
    results = work / "results"
    spec = work / "sweep.toml"
    spec.write_text(f"""
[sweep]
name = "e2e"
results_dir = "{results}"
hzpbench = "{hzpbench}"
time_per_task = "00:05:00"
requeue = false     # the kill below stays a kill (preempt_on_slurm_test.py covers checkpoint + requeue)

[base]
model.preset = "tiny"
train.steps = {STEPS}
train.warmup_steps = 1
harness.warmup_steps = 2
output.flush_s = 0.0

[axes]
"scheduler.name" = ["ddp", "zero1", "zero3"]
ranks_per_node = [2, 4]

[[exclude]]
"scheduler.name" = "ddp"
ranks_per_node = 4
[[exclude]]
"scheduler.name" = "zero1"
ranks_per_node = 4
""")
    d = results / "e2e"
    t0 = time.time()
    rc, out, err = sh(SWEEP + ["submit", str(spec)], env)
    print(out + err)
    check(rc == 0, "slurm/sweep submit")
    m = json.loads((d / "sweep.json").read_text())
    names = [t["name"] for t in m["tasks"]]
    check(names == ["name-ddp_ranks_per_node-2", "name-zero1_ranks_per_node-2", "name-zero3_ranks_per_node-2",
                    "name-zero3_ranks_per_node-4"], f"4 tasks planned: {names}")
    check(len(m["attempts"]) == 2 and sorted(len(a["indices"]) for a in m["attempts"]) == [1, 3],
          "two job arrays: 3 tasks of 2 ranks, 1 of 4")
    cpus = int(subprocess.run(["sinfo", "-h", "-N", "-o", "%c"], capture_output=True, text=True, env=env).stdout.split()[0])
    script4 = (d / "job-1n-4r.sbatch").read_text()
    check(("#SBATCH --overcommit" in script4) == (cpus < 4) and "#SBATCH --overcommit" not in (d / "job-1n-2r.sbatch").read_text(),
          f"--overcommit exactly where a node's {cpus} CPUs are fewer than its ranks")

    # Kill the zero1 task once it has flushed a step (polled every 20 ms: the window is most of its run).
    victim = "name-zero1_ranks_per_node-2"
    job = next(a["job_id"] for a in m["attempts"] if 1 in a["indices"])
    deadline = time.time() + 180
    while flushed_steps(d / f"{victim}.h5") < 1:
        if time.time() > deadline:
            fail(f"task {victim} flushed no step within 180 s; {statuses(d, env)}")
        time.sleep(0.02)
    p = subprocess.run(["scancel", f"{job}_1"], capture_output=True, text=True, env=env)
    check(p.returncode == 0, f"scancel {job}_1 while {victim} runs")

    rc, out, err = sh(SWEEP + ["status", str(d), "--wait", "240"], env, timeout=300)
    elapsed = time.time() - t0
    print(out + err)
    st = statuses(d, env)
    # scancel sends SIGTERM first: the run catches it and marks its file (`terminated by SIGTERM`); were it
    # killed before that, its file would be left at 'running'. Either way the task was stopped from outside.
    detail = st[victim]["detail"]
    check(st[victim]["state"] == "killed" and ("terminated by SIGTERM" in detail or
                                               ("CANCELLED" in detail and "results file left at 'running'" in detail)),
          f"status says the scancelled task was killed: {detail}")
    steps = int(st[victim]["steps"].split("/")[0])
    check(1 <= steps < STEPS, f"the killed task's file holds the {steps} steps flushed before the kill")
    others = [n for n in names if n != victim]
    check(all(st[n]["state"] == "ok" and st[n]["steps"] == f"{STEPS}/{STEPS}" for n in others),
          f"the other 3 tasks ok with {STEPS}/{STEPS} steps ({elapsed:.1f} s from submit to all done)")
    check(rc == 1, "status exits 1 while a task is not ok")

    import h5py
    for i, n in enumerate(names):
        if n == victim:
            continue
        with h5py.File(d / f"{n}.h5", "r") as f:
            a = f.attrs
            check(a["status"] == "ok" and a["world_size"] == (4 if n.endswith("-4") else 2)
                  and a["env.SLURM_ARRAY_TASK_ID"] == str(i) and a["env.HZP_SWEEP_TASK"] == n
                  and f["steps/loss"].shape == (STEPS,), f"{n}.h5: ok, world size, array index {i}, {STEPS} steps")
    check((d / f"{victim}.log").is_file() and "CANCELLED" in (d / "slurm" / f"{job}_1.out").read_text(),
          "logs beside the results, Slurm's output under slurm/")

    t1 = time.time()
    rc, out, err = sh(SWEEP + ["resubmit", str(d)], env)
    print(out + err)
    check(rc == 0 and "submitted 1 task(s)" in out and f"--array=1)" in out, "resubmit sends only the killed task")
    rc, out, err = sh(SWEEP + ["status", str(d), "--wait", "180"], env, timeout=240)
    print(out + err)
    st = statuses(d, env)
    check(rc == 0 and all(s["state"] == "ok" for s in st.values()),
          f"after resubmit every task is ok ({time.time() - t1:.1f} s for the resubmitted task)")
    with h5py.File(d / "superseded" / f"{victim}.attempt1.h5", "r") as f:
        status = f.attrs["status"]
        check(status == "running" or ("terminated by SIGTERM" in status and f.attrs["end_time"] != ""),
              f"the killed attempt's file is kept under superseded/ as it was left ({status})")
    rc, out, err = sh(SWEEP + ["resubmit", str(d)], env)
    check(rc == 0 and "nothing to resubmit" in out, "a second resubmit finds nothing to do")

    rc, out, err = sh([sys.executable, "-m", "analysis.collect", str(d), "--csv", str(work / "e2e.csv")], env, cwd=REPO)
    rows = (work / "e2e.csv").read_text().splitlines()
    check(rc == 0 and len(rows) == 5 and all(",ok," in r for r in rows[1:]), "analysis.collect: 4 rows, all ok")
    print(f"figures: 4-task sweep under Slurm {elapsed:.1f} s from submit to done (one killed), "
          f"resubmit {time.time() - t1:.1f} s")


if __name__ == "__main__":
    run_slurm_test(__doc__, main)
