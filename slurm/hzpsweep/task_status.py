"""Where each task of a sweep stands, from its results file (hzpbench inspect) and from whoever ran its latest
attempt (Slurm, or the local runner).

States: ok, diverged, failed (with the reason), killed (stopped from outside: a results file left at `running`
with no live job, or one the run itself marked `failed: <rank>: terminated by SIG...` when Slurm's time limit,
scancel or preemption signalled it; docs/results-schema.md), preempted (the same signal with output.checkpoint_every
on: the run stopped after a checkpoint, which the status names; the job script requeues it, else resubmit), running,
pending, never ran. `needs_rerun` says which resubmit takes, `resumes` whether it continues from the task's newest
checkpoint (killed and preempted tasks) or starts again from step 0 (failed, diverged: their checkpoints are kept
aside). The steps shown are the step reached: a resumed run's file starts at its first_step.
"""
from __future__ import annotations

import dataclasses
import os
import socket
from pathlib import Path

from . import checkpoints, hzpbench, slurm_client, sweep_dir

STATES = ("ok", "diverged", "failed", "killed", "preempted", "running", "pending", "never ran")


@dataclasses.dataclass
class TaskStatus:
    index: int
    name: str
    state: str
    detail: str = ""
    steps: str = ""          # "reached/planned" from the results file (reached = first_step + completed rows)
    job: str = ""            # "<array job>_<index>" or "local"
    checkpoint: str = ""     # the task's newest complete checkpoint (checkpoints.py), if any

    def needs_rerun(self, include_diverged: bool) -> bool:
        return self.state in ("failed", "killed", "preempted", "never ran") or (include_diverged and self.state == "diverged")

    @property
    def resumes(self) -> bool:
        """A rerun continues from the newest checkpoint: the task was stopped from outside, not by its own fault."""
        return self.state in ("killed", "preempted") and bool(self.checkpoint)


def _local_runner_alive(a: dict) -> bool:
    if a.get("host") != socket.gethostname():
        return False
    try:
        os.kill(int(a["pid"]), 0)
    except (OSError, ValueError, KeyError):
        return False
    # A recycled pid would look alive: the runner's own command line names the sweep tool.
    try:
        return b"sweep" in Path(f"/proc/{a['pid']}/cmdline").read_bytes()
    except OSError:
        return True


def _log_tail(p: Path) -> str:
    if not p.is_file():
        return ""
    lines = [l.strip() for l in p.read_text(errors="replace").splitlines() if l.strip() and not l.startswith("===")]
    return lines[-1][:200] if lines else ""


def collect(d: Path, m: dict, query_slurm: bool = True) -> list[TaskStatus]:
    program = m["hzpbench"]
    latest = sweep_dir.latest_attempts(m)
    job_ids = {a["job_id"] for a in latest.values() if a["kind"] == "slurm"}
    live: dict = {}
    final: dict = {}
    slurm_seen = bool(job_ids) and query_slurm and slurm_client.available()
    if slurm_seen:
        live = slurm_client.live_states(job_ids)
        final = slurm_client.final_states(job_ids)
    out = []
    for t in m["tasks"]:
        i, name = t["index"], t["name"]
        a = latest.get(i)
        res = sweep_dir.result_path(d, name)
        info = hzpbench.inspect(program, res) if res.exists() else None
        st = TaskStatus(i, name, "never ran")
        last = checkpoints.latest(d, name)
        st.checkpoint = str(last[0]) if last else ""
        if info and "error" not in info:
            planned = _planned_steps(info)
            reached = _reached(info)
            st.steps = f"{reached}/{planned}" if planned else str(reached)

        # Who ran the latest attempt, and is it still going?
        live_state = None
        fin = None
        if a and a["kind"] == "slurm":
            st.job = f"{a['job_id']}_{i}"
            live_state = live.get((a["job_id"], i))
            fin = final.get((a["job_id"], i))
        elif a and a["kind"] == "local":
            st.job = "local"
            r = a["results"].get(name)
            if r is None and _local_runner_alive(a):
                live_state = "RUNNING (local)" if res.exists() else "PENDING (local runner)"
            elif r is not None:
                rc = int(r["exit_code"])
                fin = {"state": "TIMEOUT (sweep.time_per_task)" if r.get("timed_out") else
                       (f"killed by signal {-rc}" if rc < 0 else f"exit {rc}"), "exit_code": "", "source": "local"}

        if a and a["kind"] == "slurm" and not slurm_seen and (info is None or info.get("status") == "running"):
            # Without squeue we cannot tell a live job from a killed one: never call it killed (resubmit
            # would run it twice).
            st.state = "running" if info else "pending"
            st.detail = "Slurm not reachable from here (no squeue): running, pending or killed; ask where Slurm is"
        elif live_state is not None:
            st.state = "pending" if live_state.startswith("PENDING") else "running"
            st.detail = live_state.lower() if st.state == "pending" else ""
        elif info is None:
            if a is None:
                st.detail = "not submitted"
            elif fin is None:
                st.detail = "no results file; " + ("Slurm no longer knows the job" if a["kind"] == "slurm"
                                                   else "the local runner stopped before it")
            elif fin["state"].startswith("CANCELLED") and not sweep_dir.log_path(d, name).exists():
                st.detail = f"cancelled before it started ({fin['state']})"
            else:
                st.state = "failed"
                tail = _log_tail(sweep_dir.log_path(d, name))
                st.detail = f"no results file; {_fin_text(fin)}" + (f": {tail}" if tail else "")
        elif "error" in info:
            st.state = "failed"
            st.detail = f"results file unreadable: {info['error']}"
        else:
            s = str(info.get("status", ""))
            if s == "ok":
                st.state = "ok"
            elif s == "diverged":
                st.state, st.detail = "diverged", "non-finite loss"
            elif s.startswith("failed") and "terminated by SIG" in s:
                # The run caught SIGTERM/SIGINT/SIGUSR1 (a time limit, scancel, preemption) and wrote its steps:
                # stopped from outside, like a kill, not a failure of its own.
                n = _reached(info)
                st.state = "killed"
                why = f" ({_fin_text(fin)})" if fin else ""
                st.detail = f"{s[len('failed'):].lstrip(': ')}{why}; {_steps_text(n)} in the file"
            elif s.startswith("failed"):
                st.state, st.detail = "failed", s[len("failed"):].lstrip(": ")
            elif s.startswith("preempted: "):
                # Stopped by a signal after writing a checkpoint (docs/checkpoints.md): the reason names it.
                st.state = "preempted"
                st.detail = f"{s[len('preempted: '):]}; reached step {_reached(info)}"
            elif s == "running":
                st.state = "killed"
                why = _fin_text(fin) if fin else "no live job"
                st.detail = f"results file left at 'running' ({why}); {_steps_text(_reached(info))} flushed"
            else:
                st.state, st.detail = "failed", f"unknown status '{s}' in the results file"
        if st.state == "killed" and last:
            st.detail += f"; resubmit resumes from {last[0].name}"
        out.append(st)
    return out


def _fin_text(fin: dict) -> str:
    return fin["state"] + (f", exit {fin['exit_code']}" if fin.get("exit_code") else "")


def _reached(info: dict):
    """The last step in the file, counted from 1: a resumed run's rows start after its first_step."""
    n = info.get("completed_steps")
    return int(info.get("first_step") or 0) + int(n) if isinstance(n, int) else "?"


def _steps_text(n) -> str:
    return f"{n} step{'' if n == 1 else 's'}" if n != "?" else "? steps"


def _planned_steps(info: dict) -> int | None:
    cfg = info.get("config") or {}
    v = cfg.get("train.steps") if isinstance(cfg, dict) else None
    return int(v) if isinstance(v, (int, float)) else None


def counts(rows: list[TaskStatus]) -> dict[str, int]:
    c = {s: 0 for s in STATES}
    for r in rows:
        c[r.state] += 1
    return {k: v for k, v in c.items() if v}
