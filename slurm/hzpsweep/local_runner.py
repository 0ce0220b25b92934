"""Runs a sweep's tasks one after another on this machine, without Slurm: the same configurations, results
files, logs and environment as the job script (batch_script.py), with `mpiexec -n <world size>` as the
launcher, and the same checkpoints: a task resumes from the newest in checkpoints/<task>/ (a preempted or
killed one that resubmit --local reruns). Each task's outcome goes into the manifest as it finishes, so
`status` reads it while the runner is still going (and tells a runner that died from one that is working).
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from . import checkpoints, sweep_dir


def run(d: Path, m: dict, indices: list[int], mpiexec: str, log=print) -> dict[str, int]:
    """Runs the tasks at `indices` of the sweep in folder d (manifest m); returns task -> exit code."""
    attempt = sweep_dir.local_attempt(indices)
    m["attempts"].append(attempt)
    sweep_dir.write_manifest(d, m)
    env = dict(os.environ)
    env.update(m["job_env"])
    env["HZP_SWEEP"] = m["name"]
    limit = m.get("time_per_task_s")
    by_index = {t["index"]: t for t in m["tasks"]}
    codes: dict[str, int] = {}
    for n, i in enumerate(indices, 1):
        t = by_index[i]
        name, world = t["name"], t["world_size"]
        ckpt = checkpoints.resume_args(d, name)
        if "--resume" in ckpt and sweep_dir.result_path(d, name).exists():
            sweep_dir.supersede(d, name)     # the run it continues, as the job script keeps it
        cmd = [mpiexec, "-n", str(world), m["hzpbench"], "run", "--config", str(sweep_dir.config_path(d, name)),
               "--out", str(sweep_dir.result_path(d, name))] + ckpt
        env["HZP_SWEEP_TASK"] = name
        start = time.time()
        log(f"[{n}/{len(indices)}] {name}: {world} rank(s) ...")
        with open(sweep_dir.log_path(d, name), "a") as lf:
            lf.write(f"=== sweep {m['name']} task {name}: local run on {os.uname().nodename} at {sweep_dir.now()}\n")
            lf.flush()
            # Own process group: a timeout ends mpiexec and every rank it started, nothing else.
            p = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            timed_out = False
            try:
                rc = p.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                timed_out = True
                rc = _stop(p)
            except KeyboardInterrupt:
                # The task runs in its own session, out of reach of the terminal's Ctrl-C: end it too.
                rc = _stop(p)
                attempt["results"][name] = {"exit_code": rc, "timed_out": False, "start": start, "end": time.time()}
                sweep_dir.write_manifest(d, m)
                raise
        attempt["results"][name] = {"exit_code": rc, "timed_out": timed_out, "start": start, "end": time.time()}
        sweep_dir.write_manifest(d, m)
        codes[name] = rc
        log(f"      exit {rc}{' (time limit sweep.time_per_task reached)' if timed_out else ''} after "
            f"{time.time() - start:.1f} s; log {sweep_dir.log_path(d, name)}")
    return codes


def _stop(p: subprocess.Popen) -> int:
    """SIGTERM to the task's process group (mpiexec and its ranks), SIGKILL after 10 s."""
    os.killpg(p.pid, signal.SIGTERM)
    try:
        return p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        return p.wait()
